"""Deliveries as the notify_dispatch job makes them (run here through the job runner, against
local receivers): signed bodies, Slack's format, retries with exponential back-off, give-up,
4xx at once, and emitting that never fails its caller."""

from __future__ import annotations

import time

import pytest
from django.db import transaction
from django.utils import timezone

from tests.notify.helpers import Receiver
from trustrank.jobs.runner import job_run
from trustrank.notify.events import notify, notify_many, notify_ping
from trustrank.notify.models import Delivery, NotifyBatch, Webhook

pytestmark = pytest.mark.django_db(transaction=True)

FINDING = {
    "finding_id": 7, "finding_url": "http://tr.example/findings/7/", "title": "Log4Shell",
    "vuln_id": "CVE-2021-44228", "component": "log4j-core@2.14.1", "project": "gateway",
    "version": "1.0", "service": "payment-gateway", "environment": "shop", "rank": 1,
    "decision": "immediate", "previous_decision": "scheduled",
    "explanation": [{"name": "exploitation", "value": "active", "effect": 30.0}],
}


@pytest.fixture
def receiver(settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    settings.TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS = 0.3
    r = Receiver()
    yield r
    r.stop()


def hook_for(team, receiver, *, events=("finding.immediate",), **extra):
    return Webhook.objects.create(team=team, url=receiver.url, events=list(events),
                                  secret="top-secret", **extra)


def drain(timeout: float = 20) -> None:
    """Run every notify job that is ready until no delivery is open (a worker would)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = NotifyBatch.objects.filter(status="queued", ready_at__lte=timezone.now())
        for pk in ready.values_list("pk", flat=True):
            job_run(kind_name="notify_dispatch", job_id=str(pk))
        if not NotifyBatch.objects.filter(status__in=("queued", "running")).exists():
            return
        time.sleep(0.05)
    raise AssertionError("deliveries still open")


def test_a_delivery_is_signed_json_naming_the_finding(team, receiver):
    hook_for(team, receiver)
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    (got,) = receiver.requests
    assert got.signed_by("top-secret") and not got.signed_by("another")
    body = got.json
    assert body["event"] == "finding.immediate"
    assert {k: body[k] for k in FINDING} == FINDING
    assert body["team"] == {"id": team.pk, "name": team.name} and body["occurred_at"]
    delivery = Delivery.objects.get()
    assert body["delivery_id"] == str(delivery.uuid)
    assert got.headers["X-TrustRank-Event"] == "finding.immediate"
    assert got.headers["X-TrustRank-Delivery"] == str(delivery.uuid)
    assert got.headers["Content-Type"] == "application/json"
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("delivered", 200, 1)


def test_a_failed_delivery_is_retried_with_growing_back_off_then_delivered(team, receiver):
    receiver.answers = [500, 503]
    hook_for(team, receiver)
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    assert receiver.count == 3
    first, second, third = (r.at for r in receiver.requests)
    assert second - first >= 0.3 and third - second >= 0.6
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("delivered", 200, 3)
    # The same delivery (id, body, signature) each time.
    assert len({r.headers["X-TrustRank-Delivery"] for r in receiver.requests}) == 1


@pytest.mark.parametrize("code", [429, 408])
def test_429_and_408_are_retried(team, receiver, code):
    receiver.answers = [code]
    hook_for(team, receiver)
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    assert receiver.count == 2 and Delivery.objects.get().status == "delivered"


@pytest.mark.parametrize("code", [400, 404, 410])
def test_another_4xx_fails_at_once(team, receiver, code):
    receiver.answers = [code]
    hook_for(team, receiver)
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    delivery = Delivery.objects.get()
    assert receiver.count == 1
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("failed", code, 1)


def test_a_delivery_gives_up_after_the_cap(team, receiver, settings):
    settings.TRUSTRANK_WEBHOOK_MAX_ATTEMPTS = 3
    settings.TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS = 0.05
    receiver.answers = [500] * 10
    hook_for(team, receiver)
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    delivery = Delivery.objects.get()
    assert receiver.count == 3
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("failed", 3, 500)
    assert "gave up after 3 attempts" in delivery.error


def test_slack_format_names_finding_rank_decision_and_link(team, receiver):
    hook_for(team, receiver, format="slack")
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    (got,) = receiver.requests
    body = got.json
    assert got.signed_by("top-secret")
    assert "Log4Shell" in body["text"] and body["blocks"][0]["text"]["type"] == "mrkdwn"
    text = "\n".join(b["text"]["text"] for b in body["blocks"] if "text" in b)
    assert "<http://tr.example/findings/7/|Log4Shell>" in text
    assert "*Rank:* 1" in text and "immediate" in text and "was scheduled" in text


def test_only_the_teams_enabled_webhooks_listening_to_the_event_receive_it(
    team, other_team, receiver, settings
):
    others = [Receiver() for _ in range(3)]
    try:
        hook_for(team, receiver)
        hook_for(other_team, others[0])
        hook_for(team, others[1], enabled=False)
        hook_for(team, others[2], events=("job.failed",))
        notify_many(team_id=team.pk, event="finding.immediate", payloads=[FINDING] * 3)
        assert NotifyBatch.objects.count() == 1  # one row, whatever the number of events
        drain()
        assert receiver.count == 3 and [o.count for o in others] == [0, 0, 0]
    finally:
        for o in others:
            o.stop()


def test_nobody_listening_writes_nothing(team):
    notify(team_id=team.pk, event="gate.failed", payload={"gate": "release"})
    assert not NotifyBatch.objects.exists()


def test_emitting_never_fails_the_caller(team, receiver):
    hook_for(team, receiver, events=("gate.failed",))
    with transaction.atomic():
        notify(team_id=team.pk, event="gate.failed", payload={"bad": object()})
        # The caller's transaction is still usable.
        assert Webhook.objects.filter(team=team).count() == 1
    assert not NotifyBatch.objects.exists()


def test_a_ping_goes_to_that_webhook_only(team, receiver):
    other = Receiver()
    try:
        hook = hook_for(team, receiver, events=("job.failed",))
        hook_for(team, other, events=("job.failed",))
        notify_ping(webhook=hook)
        drain()
        assert receiver.events() == ["ping"] and other.count == 0
    finally:
        other.stop()


def test_an_address_refused_at_send_time_fails_the_delivery_at_once(team, receiver, settings):
    hook_for(team, receiver)
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = False
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    delivery = Delivery.objects.get()
    assert receiver.count == 0 and delivery.status == "failed"
    assert "loopback" in delivery.error


def test_gate_failed_is_delivered_with_the_gates_payload(team, receiver):
    from trustrank.notify.events import notify_gate_failed

    hook_for(team, receiver, events=("gate.failed",))
    notify_gate_failed(team_id=team.pk, payload={"gate": "release", "project": "shop"})
    drain()
    (got,) = receiver.requests
    assert got.signed_by("top-secret") and got.json["gate"] == "release"
    assert got.json["event"] == "gate.failed" and got.json["team"]["id"] == team.pk



def test_a_jira_webhook_is_delivered_through_jira_deliver(team, receiver, monkeypatch):
    """The contract with the Jira side (trustrank.jira, another part, imported when a
    delivery needs it): `jira_deliver(webhook=, event=, payload=) -> (status, detail)`, its
    status deciding as an HTTP answer would. A stand-in module records the calls here."""
    import sys
    import types

    calls = []
    answers = [(503, "Jira is away"), (201, "SEC-1")]

    def jira_deliver(*, webhook, event, payload):
        calls.append((webhook.pk, event, payload))
        return answers.pop(0)

    stand_in = types.ModuleType("trustrank.jira.services")
    stand_in.jira_deliver = jira_deliver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trustrank.jira.services", stand_in)
    hook = hook_for(team, receiver, format="jira", jira_project_key="SEC")
    notify(team_id=team.pk, event="finding.immediate", payload=FINDING)
    drain()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("delivered", 201, 2)
    assert receiver.count == 0 and len(calls) == 2
    webhook_id, event, payload = calls[0]
    assert (webhook_id, event) == (hook.pk, "finding.immediate")
    assert payload["finding_id"] == 7 and payload["delivery_id"] == str(delivery.uuid)
