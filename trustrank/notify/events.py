"""Emitting events: cheap, never blocking, never failing the caller.

An emitter writes at most one `NotifyBatch` row (none when no enabled webhook of the team
listens to the event) in a savepoint of its own transaction, so the batch commits with the
caller's work (a ranking run rolled back emits nothing) and a failure here only logs. The
worker (the job kind `notify_dispatch`) fans the batch out and delivers it.

Callers:
- `notify` / `notify_many`: any event with its payload(s) (`gate.failed` from the gate).
- `notify_ranking_run`: the bulk form a ranking run calls once; the worker reads the run's
  decision changes (`finding.decision_changed`, and `finding.immediate` for those that
  became immediate) through the source the ranking app registers.
- `notify_kev_added`: a KEV import's new CVE ids; the worker finds the teams they hit.
- `notify_job_failed`: the job runner and sweep, for any job that ends failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger(__name__)

FINDING_EVENTS = ("finding.immediate", "finding.decision_changed")


def _listened(*, team_id: int | None, events: Iterable[str]) -> bool:
    from trustrank.notify.models import Webhook

    wanted = Q()
    for event in events:
        wanted |= Q(events__contains=[event])
    hooks = Webhook.objects.filter(wanted, enabled=True)
    if team_id is not None:
        hooks = hooks.filter(team_id=team_id)
    return hooks.exists()


def _batch_write(**fields: Any) -> None:
    from trustrank.jobs.send import job_send
    from trustrank.notify.models import NotifyBatch

    batch = NotifyBatch.objects.create(enqueued_at=timezone.now(), **fields)
    batch_id, job_class, priority = batch.pk, batch.job_class, batch.priority

    def send() -> None:
        job_send(kind="notify_dispatch", job_id=batch_id, job_class=job_class,
                 priority=priority)

    # Robust: a broker away must not fail the caller after its commit (the job sweep sends
    # a queued job's message again after TRUSTRANK_JOB_REQUEUE_SECONDS).
    transaction.on_commit(send, robust=True)


def _safely(what: str, write: Any) -> None:
    """Run `write` in a savepoint; log and swallow any error (a broken webhook config, a
    database hiccup) so the caller's work goes on and its transaction stays usable."""
    try:
        with transaction.atomic():
            write()
    except Exception:
        log.exception("notify: could not record %s; the caller goes on", what)


def notify(*, team_id: int, event: str, payload: dict[str, Any]) -> None:
    """Emit one event for a team (delivered by the worker to the team's webhooks)."""
    notify_many(team_id=team_id, event=event, payloads=[payload])


def notify_many(*, team_id: int, event: str, payloads: list[dict[str, Any]]) -> None:
    """Emit many events of one kind for a team: one row, whatever their number."""
    if not payloads:
        return

    def write() -> None:
        if _listened(team_id=team_id, events=[event]):
            _batch_write(team_id=team_id, source="events", event=event, items=list(payloads))

    _safely(event, write)


def notify_ranking_run(*, team_id: int, run_id: int) -> None:
    """A ranking run stored its queue: its decision changes become finding events (the
    worker reads them from the run; the run writes one row, and only when listened to)."""

    def write() -> None:
        if _listened(team_id=team_id, events=FINDING_EVENTS):
            _batch_write(team_id=team_id, source="ranking_run", ref_id=run_id)

    _safely("a ranking run's decision changes", write)


def notify_kev_added(*, cve_ids: list[str]) -> None:
    """A KEV import added these CVE ids (site-wide: the worker finds the teams they hit)."""
    if not cve_ids:
        return

    def write() -> None:
        if _listened(team_id=None, events=["feed.kev_added"]):
            _batch_write(team_id=None, source="kev", event="feed.kev_added",
                         items=sorted(set(cve_ids)))

    _safely("KEV additions", write)


def notify_gate_failed(*, team_id: int, payload: dict[str, Any]) -> None:
    """For the gate: a gate evaluation failed (`gate.failed`)."""
    notify(team_id=team_id, event="gate.failed", payload=payload)


def notify_job_failed(*, kind: str, job: Any, message: str) -> None:
    """For the job runner and sweep: a job of the team ended failed (`job.failed`). The
    notify jobs themselves are left out: a broken receiver must not feed itself."""
    if kind == "notify_dispatch":
        _round_failed(job=job, message=message)
        return
    team_id = getattr(job, "team_id", None)
    if team_id is None:
        return
    notify(team_id=int(team_id), event="job.failed", payload={
        "job": {
            "kind": kind,
            "id": str(job.pk),
            "error": message[:2000],
            "attempts": int(getattr(job, "attempts", 0) or 0),
        },
    })


def _round_failed(*, job: Any, message: str) -> None:
    """A delivery job that failed for good (its worker died every time): its open
    deliveries end failed, saying why, instead of staying open for ever."""
    from trustrank.notify.models import OPEN_STATUSES, Delivery, DeliveryStatus

    def write() -> None:
        Delivery.objects.filter(round_id=job.pk, status__in=OPEN_STATUSES).update(
            status=DeliveryStatus.FAILED, next_attempt_at=None,
            error=f"its delivery job failed: {message}"[:2000],
        )

    _safely("the failure of a delivery job", write)


def notify_ping(*, webhook: Any) -> None:
    """"Send a test ping" on the webhooks page: one `ping` event to this webhook only."""

    def write() -> None:
        _batch_write(team_id=webhook.team_id, source="ping", event="ping", ref_id=webhook.pk,
                     items=[{"message": "A test ping from TrustRank."}])

    _safely("a ping", write)
