"""Loads record that evidence changed; ranking's beat sweep turns the changes into one
debounced ranking run per team."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from tests.identity.pki import make_pki
from tests.identity.test_services import upload
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.accounts.principal import Principal
from trustrank.findings.records import EvidenceChange
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.jobs.claim import job_claim
from trustrank.jobs.registry import job_kind
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.requests import ranking_evidence_sweep, ranking_run_request
from trustrank.runtime.deployment import DeploymentRequest, deployment_set

pytestmark = pytest.mark.django_db


def _changes(team) -> list[str]:
    return list(EvidenceChange.objects.filter(team=team).values_list("what", flat=True))


def _sbom(team) -> None:
    """An SBOM load: its job matches and records the change in its own transaction."""
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))


def _record_at(team, what: str, at) -> None:
    evidence_change_record(team_id=None if team is None else team.pk, what=what)
    EvidenceChange.objects.filter(what=what).update(created_at=at)


def test_a_load_records_a_change_and_asks_ranking_for_nothing(team, other_team):
    upload(team, make_pki().leaf("/svc").pem)  # a certificate job
    _sbom(team)
    assert len(_changes(team)) == 2
    assert any(w.startswith("certificates job") for w in _changes(team))
    assert any(w.startswith("SBOM of project version") for w in _changes(team))
    assert not RankingRun.objects.exists()
    assert _changes(other_team) == []


def test_a_deployment_records_a_change_whoever_sets_it(team):
    load_sbom(team, bom([("etcd", "3.4.9", "pkg:golang/etcd@3.4.9")]), project="etcd",
              version="3.4.9")
    EvidenceChange.objects.filter(team=team).delete()  # the SBOM job's own
    deployment_set(
        team=team, environment="prod", service="etcd",
        request=DeploymentRequest(project="etcd", version="3.4.9"), source="api",
        principal=Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})}),
    )
    assert _changes(team) == ["deployment of etcd in prod"]


def test_loads_share_one_debounced_run(team, other_team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    before = timezone.now()
    upload(team, make_pki().leaf("/svc").pem)
    _sbom(team)
    assert ranking_evidence_sweep() == 1
    runs = list(RankingRun.objects.filter(team=team))
    assert len(runs) == 1 and runs[0].status == "queued" and runs[0].job_class == "interactive"
    assert runs[0].not_before >= before + timedelta(seconds=59)
    assert runs[0].trigger.startswith("after certificates job")
    assert not RankingRun.objects.filter(team=other_team).exists()
    # The changes were taken: the next sweep has nothing to do.
    assert EvidenceChange.objects.count() == 0
    assert ranking_evidence_sweep() == 0 and RankingRun.objects.count() == 1


def test_the_run_starts_a_debounce_after_the_first_change(team, other_team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    now = timezone.now()
    _record_at(team, "first", now - timedelta(seconds=20))
    _record_at(team, "second", now - timedelta(seconds=10))
    _record_at(team, "third", now)
    _record_at(other_team, "other", now - timedelta(seconds=5))
    assert ranking_evidence_sweep() == 2
    run = RankingRun.objects.get(team=team)
    assert run.trigger == "after first"
    expected = now - timedelta(seconds=20) + timedelta(seconds=60)
    assert abs((run.not_before - expected).total_seconds()) < 2
    other = RankingRun.objects.get(team=other_team)
    assert abs((other.not_before - (now + timedelta(seconds=55))).total_seconds()) < 2


def test_a_trace_window_is_ranked_at_once_while_an_sbom_waits(team, other_team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    settings.TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS = 0
    now = timezone.now()
    evidence_change_record(team_id=other_team.pk, what="SBOM of project version 1")
    evidence_change_record(team_id=team.pk, what="SBOM of project version 2")
    evidence_change_record(team_id=team.pk, what="traces job 7", kind="traces")
    assert ranking_evidence_sweep() == 2
    # The trace window brings the team's run forward past its SBOM's debounce.
    run = RankingRun.objects.get(team=team)
    assert run.trigger == "after traces job 7"
    assert run.not_before <= timezone.now()
    other = RankingRun.objects.get(team=other_team)
    assert other.not_before >= now + timedelta(seconds=59)


def test_a_traces_job_records_a_change_of_its_kind(team):
    from ingest.models import IngestJob
    from ingest.services import _rerank_after

    _rerank_after(IngestJob(pk=5, team=team, kind="traces"))
    assert list(EvidenceChange.objects.filter(team=team).values_list("what", "kind")) == [
        ("traces job 5", "traces")]


def test_changes_within_the_delay_join_the_waiting_run(team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    evidence_change_record(team_id=team.pk, what="a")
    ranking_evidence_sweep()
    run = RankingRun.objects.get(team=team)
    evidence_change_record(team_id=team.pk, what="b")
    ranking_evidence_sweep()
    assert list(RankingRun.objects.filter(team=team)) == [run]
    # It starts when the first change asked for, not later.
    assert RankingRun.objects.get(pk=run.pk).not_before == run.not_before


def test_a_change_the_sweep_sees_late_ranks_at_once(team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    _record_at(team, "long ago", timezone.now() - timedelta(minutes=5))
    ranking_evidence_sweep()
    assert RankingRun.objects.get(team=team).not_before <= timezone.now()


def test_a_change_during_a_run_leads_to_a_later_run(team, settings):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    running = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert job_claim(job_kind("ranking_run"), running.pk) is not None  # a worker ranks it
    evidence_change_record(team_id=team.pk, what="an SBOM while it ranks")
    assert ranking_evidence_sweep() == 1
    later = RankingRun.objects.get(team=team, status="queued")
    assert later.pk != running.pk and later.trigger == "after an SBOM while it ranks"
    assert later.not_before > timezone.now() + timedelta(seconds=50)
    assert RankingRun.objects.get(pk=running.pk).status == "running"


def test_a_change_not_committed_is_not_taken(team):
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic():
        evidence_change_record(team_id=team.pk, what="rolled back")
        raise RuntimeError("the load failed")
    assert ranking_evidence_sweep() == 0 and not RankingRun.objects.exists()


def test_a_feed_ranks_every_team_with_open_vulnerabilities_as_batch_work(
    team, other_team, settings
):
    settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS = 60
    import_osv(team, [osv("GHSA-lodash", "npm", "lodash",
                          [{"introduced": "0"}, {"fixed": "4.17.21"}])])
    (change,) = EvidenceChange.objects.all()
    assert change.team_id is None and change.what.startswith("osv feed job")
    # A team with an open vulnerability finding and no change of its own (its SBOM job's
    # change taken away).
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))
    EvidenceChange.objects.filter(team=team).delete()
    assert ranking_evidence_sweep() == 1
    run = RankingRun.objects.get(team=team)
    assert run.job_class == "batch" and run.trigger.startswith("after osv feed job")
    assert not RankingRun.objects.filter(team=other_team).exists()


def test_a_teams_own_change_makes_its_feed_run_interactive(team, settings):
    import_osv(team, [osv("GHSA-lodash", "npm", "lodash",
                          [{"introduced": "0"}, {"fixed": "4.17.21"}])])
    _sbom(team)
    assert {c.team_id for c in EvidenceChange.objects.all()} == {None, team.pk}
    ranking_evidence_sweep()
    assert RankingRun.objects.get(team=team).job_class == "interactive"


def test_beat_runs_the_evidence_sweep_every_few_seconds():
    from trustrank.celery import app

    entry = django_settings.CELERY_BEAT_SCHEDULE["ranking-evidence-sweep"]
    app.loader.import_default_modules()
    assert entry["task"] in app.tasks
    assert entry["schedule"] == timedelta(
        seconds=django_settings.TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS
    )
    assert django_settings.TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS <= 5


def test_run_that_is_not_due_waits(team, settings):
    from trustrank.ranking.services.runs import ranking_run_execute

    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=3600)
    assert ranking_run_execute(run_id=run.pk) == "waiting"
    run.refresh_from_db()
    assert run.status == "queued"
    # Asking for a run now brings the waiting one forward instead of adding another.
    again = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert again.pk == run.pk and ranking_run_execute(run_id=run.pk) == "done"
    assert ranking_run_execute(run_id=run.pk) == "finished before"  # twice: runs once


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_with_beat_ranks_after_a_load_by_itself(team, start_worker):
    """The path the demo's worker runs: an upload's job records the change, embedded beat's
    sweep asks for the debounced run, the worker ranks."""
    from ingest import submit
    from tests.conftest import wait_for
    from tests.identity.test_services import writer

    start_worker(beat=True, TRUSTRANK_RANKING_DEBOUNCE_SECONDS="1",
                 TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS="1")
    submit.certificates_submit(principal=writer(team), team=team,
                               body=make_pki().leaf("/svc").pem, environment="prod",
                               service="", namespace="")
    run = wait_for(
        lambda: RankingRun.objects.filter(team=team, status="done").first(), timeout=90
    )
    assert isinstance(run, RankingRun) and run.trigger.startswith("after certificates job")
    assert not EvidenceChange.objects.exists()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_ranks_within_seconds_after_a_trace_window(team, start_worker):
    """A traces job (a trace window aggregated into the call graph) records its change; the
    sweep asks for a run at once, though other loads wait a long debounce."""
    from opentelemetry.trace import SpanKind

    from ingest import submit
    from tests.conftest import wait_for
    from tests.runtime.helpers import SpanFactory

    start_worker(beat=True, TRUSTRANK_RANKING_DEBOUNCE_SECONDS="600",
                 TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS="0",
                 TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS="1")
    spans = SpanFactory(env="prod")
    spans.span(service="shop", name="GET /", kind=SpanKind.SERVER, trace_id=spans.trace_id(),
               attributes={"client.address": "93.184.216.34"})
    submit.traces_submit(
        principal=Principal(scopes_by_team={team.pk: frozenset({"traces:write"})}),
        team=team, body=spans.body(), json_encoded=False, spans=1, priority=None,
        content_type="application/x-protobuf")
    run = wait_for(
        lambda: RankingRun.objects.filter(team=team, status="done").first(), timeout=90
    )
    assert isinstance(run, RankingRun) and run.trigger.startswith("after traces job")
