"""A worker killed (SIGKILL, its whole process group) in the middle of sending a batch of
deliveries: the job sweep queues the batch again, a second worker sends what was left, and
every delivery ends delivered — none lost, none stuck in `sending`. A delivery the dead
worker had on the wire may arrive twice (at least once: receivers dedupe by its id)."""

from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tests.notify.helpers import Receiver
from trustrank.notify.events import notify_many
from trustrank.notify.models import Delivery, NotifyBatch, Webhook

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ENV = {
    "TRUSTRANK_OUTBOUND_ALLOW_PRIVATE": "1",
    "TRUSTRANK_JOB_LEASE_SECONDS": "3",
    "TRUSTRANK_JOB_HEARTBEAT_SECONDS": "0.5",
    # A few deliveries per claim, so the batch takes several progress reports.
    "TRUSTRANK_WEBHOOK_CHUNK": "4",
    "TRUSTRANK_WEBHOOK_CONCURRENCY": "2",
}
EVENTS = 40


def test_a_batch_whose_worker_is_killed_is_delivered_whole_after_the_sweep(team, start_worker):
    receiver = Receiver()
    try:
        Webhook.objects.create(team=team, url=receiver.url, events=["gate.failed"],
                               secret="k")
        first = start_worker(TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS="1.0", **ENV)
        notify_many(team_id=team.pk, event="gate.failed",
                    payloads=[{"gate": f"release-{i}"} for i in range(EVENTS)])
        # Mid-batch: the fan-out is done and some deliveries are sent, not all.
        wait_for(lambda: receiver.count >= 8, timeout=60)
        first.kill()
        assert receiver.count < EVENTS
        batch = NotifyBatch.objects.get(source="events")
        assert batch.status == "running" and batch.fanned_out
        assert Delivery.objects.exclude(status="delivered").exists()

        start_worker(beat=True, TRUSTRANK_SWEEP_SECONDS="1", **ENV)
        wait_for(lambda: not Delivery.objects.exclude(status="delivered").exists(),
                 timeout=90)
        batch.refresh_from_db()
        wait_for(lambda: NotifyBatch.objects.get(pk=batch.pk).status == "done", timeout=30)
        assert NotifyBatch.objects.get(pk=batch.pk).attempts == 2
        assert Delivery.objects.count() == EVENTS
        received = {r.headers["X-TrustRank-Delivery"] for r in receiver.requests}
        assert received == {str(u) for u in Delivery.objects.values_list("uuid", flat=True)}
        # At most the chunk the dead worker had in flight came twice.
        assert receiver.count - EVENTS <= 4
        gates = sorted(r.json["gate"] for r in receiver.requests)
        assert set(gates) == {f"release-{i}" for i in range(EVENTS)}
    finally:
        receiver.stop()
