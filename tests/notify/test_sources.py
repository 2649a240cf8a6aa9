"""What a ranking run and a KEV import emit: one row each, however many findings, only when
a webhook listens; the worker expands it into the finding events (in process here; the
end-to-end test runs the same through a worker)."""

from __future__ import annotations

import pytest

from tests.ranking.scenario import build
from trustrank.findings.models import Finding
from trustrank.jobs.registry import job_kind
from trustrank.jobs.runner import job_fail
from trustrank.notify.models import NotifyBatch, NotifyEvent, Webhook
from trustrank.notify.services.dispatch import _events_of
from trustrank.ranking.models import RankedFinding, RankingRun
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://93.184.215.14/hook"


def rerank(team) -> RankingRun:
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(pk=run.pk).error
    return RankingRun.objects.get(pk=run.pk)


def test_a_ranking_run_nobody_listens_to_writes_no_row(team):
    build(team)
    Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    rerank(team)
    assert not NotifyBatch.objects.exists()


def test_a_ranking_run_writes_one_row_and_its_changes_become_events(team):
    build(team)
    Webhook.objects.create(team=team, url=URL, secret="x",
                           events=["finding.immediate", "finding.decision_changed"])
    first = rerank(team)
    (batch,) = NotifyBatch.objects.filter(source="ranking_run")
    assert batch.ref_id == first.pk and batch.items == []
    events = _events_of(batch)
    immediate = set(RankedFinding.objects.filter(team=team, decision="immediate")
                    .values_list("finding_id", flat=True))
    assert immediate  # Log4Shell in the internet-facing gateway
    # The team's first run: the findings entering as immediate, each with both events.
    assert sorted((e[1], e[2]["finding_id"]) for e in events) == sorted(
        [("finding.immediate", f) for f in immediate]
        + [("finding.decision_changed", f) for f in immediate])
    log4j = next(e[2] for e in events if e[2]["vuln_id"] == "CVE-2021-44228")
    assert log4j["decision"] == "immediate" and log4j["previous_decision"] is None
    assert log4j["rank"] == 1 and log4j["explanation"] and log4j["team"]["id"] == team.pk
    assert log4j["service"] == "payment-gateway" and "log4j-core" in log4j["component"]
    nested = log4j["finding"]
    assert (nested["id"], nested["component"], nested["version"], nested["decision"]) == (
        log4j["finding_id"], "log4j-core", "2.14.1", "immediate")
    assert nested["url"] == log4j["finding_url"] and nested["rank"] == 1

    # The next run moves a decision: Log4Shell resolved and reopened is ranked again; a
    # finding whose decision did not change emits nothing.
    NotifyBatch.objects.all().delete()
    gone = Finding.objects.get(team=team, vuln_id="CVE-2021-44228")
    RankedFinding.objects.filter(finding=gone).update(decision="scheduled")
    from trustrank.ranking.services import runs

    runs._PREVIOUS.clear()  # the next run compares with the stored rows
    second = rerank(team)
    (batch,) = NotifyBatch.objects.filter(source="ranking_run", ref_id=second.pk)
    events = _events_of(batch)
    assert sorted(e[1] for e in events) == ["finding.decision_changed", "finding.immediate"]
    assert {e[2]["previous_decision"] for e in events} == {"scheduled"}


def test_a_kev_addition_hits_the_teams_with_that_cve(team, other_team):
    from trustrank.notify.events import notify_kev_added

    build(team)
    Webhook.objects.create(team=team, url=URL, events=["feed.kev_added"], secret="x")
    notify_kev_added(cve_ids=["CVE-2020-15115", "CVE-1999-0001"])
    (batch,) = NotifyBatch.objects.filter(source="kev")
    events = _events_of(batch)
    assert [(t, e, p["kev_cve_id"]) for t, e, p in events] == [
        (team.pk, "feed.kev_added", "CVE-2020-15115")]
    assert events[0][2]["vuln_id"] == "CVE-2020-15115"


def test_a_failed_job_emits_job_failed_for_its_team(team):
    Webhook.objects.create(team=team, url=URL, events=["job.failed"], secret="x")
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    RankingRun.objects.filter(pk=run.pk).update(status="running", attempts=1)
    run.refresh_from_db()
    assert job_fail(job_kind("ranking_run"), run, message="boom")
    (batch,) = NotifyBatch.objects.filter(event="job.failed")
    assert batch.items == [{"job": {"kind": "ranking_run", "id": str(run.pk),
                                    "error": "boom", "attempts": 1}}]
    assert not NotifyEvent.objects.exists()  # fanned out by the worker, not here


def test_a_ranking_run_that_changes_nothing_writes_no_row(team):
    build(team)
    Webhook.objects.create(team=team, url=URL, secret="x", events=["finding.decision_changed"])
    rerank(team)
    assert NotifyBatch.objects.count() == 1
    rerank(team)
    assert NotifyBatch.objects.count() == 1


def test_a_delivery_job_that_fails_for_good_fails_its_open_deliveries(team):
    from trustrank.notify.events import notify
    from trustrank.notify.models import Delivery
    from trustrank.notify.services.dispatch import _fan_out

    Webhook.objects.create(team=team, url=URL, events=["gate.failed"], secret="x")
    notify(team_id=team.pk, event="gate.failed", payload={"gate": "g"})
    batch = NotifyBatch.objects.get()
    _fan_out(batch)
    NotifyBatch.objects.filter(pk=batch.pk).update(status="running", attempts=5)
    batch.refresh_from_db()
    assert job_fail(job_kind("notify_dispatch"), batch, message="the worker stopped")
    delivery = Delivery.objects.get()
    assert delivery.status == "failed" and "the worker stopped" in delivery.error
    assert NotifyBatch.objects.count() == 1  # no job.failed about itself


def test_retention_deletes_old_finished_deliveries_and_keeps_open_ones(team, settings):
    from datetime import timedelta

    from django.utils import timezone

    from trustrank.notify.models import Delivery
    from trustrank.notify.services.retention import notify_retention_apply

    settings.TRUSTRANK_WEBHOOK_RETENTION_DAYS = 30
    hook = Webhook.objects.create(team=team, url=URL, events=["gate.failed"], secret="x")
    old = timezone.now() - timedelta(days=31)
    batches = [NotifyBatch.objects.create(team=team, source="events", status="done",
                                          created_at=old) for _ in range(2)]
    events = [NotifyEvent.objects.create(batch=b, team=team, event="gate.failed", payload={},
                                         occurred_at=old) for b in batches]
    Delivery.objects.create(webhook=hook, notify_event=events[0], event="gate.failed",
                            status="delivered", created_at=old)
    kept = Delivery.objects.create(webhook=hook, notify_event=events[1], event="gate.failed",
                                   status="retrying", created_at=old)
    assert notify_retention_apply() == {"deliveries": 1, "events": 1, "batches": 1}
    assert list(Delivery.objects.all()) == [kept]
    assert list(NotifyBatch.objects.all()) == [batches[1]]
