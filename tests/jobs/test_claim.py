"""A worker takes a job in one statement that also returns the job's row; why a claim
failed is read only after it failed."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ingest.models import IngestJob
from ingest.services import job_create
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.jobs.claim import job_claim
from trustrank.jobs.models import JobClass, JobStatus
from trustrank.jobs.registry import job_kind
from trustrank.jobs.runner import job_run
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    messages: list[Any] = []
    monkeypatch.setattr(
        "trustrank.jobs.tasks.jobs_run.apply_async",
        lambda *a, **kw: messages.append((a, kw)),
    )
    return messages


def _job(team: Any) -> IngestJob:
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    return job_create(team=team, kind="osv", payload=b"[]", principal=principal,
                      params={"source": "test", "n": 1})


def test_a_claim_is_one_statement_that_returns_the_claimed_row(team, sent):
    job = _job(team)
    with CaptureQueriesContext(connection) as queries:
        claimed = job_claim(job_kind("ingest"), job.pk, direct=True)
    assert len(queries) == 1 and queries[0]["sql"].startswith('UPDATE "ingest_ingestjob"')
    stored = IngestJob.objects.get(pk=job.pk)
    assert isinstance(claimed, IngestJob) and claimed.pk == job.pk
    # Every field as the database holds it after the claim, JSON decoded.
    for field in IngestJob._meta.concrete_fields:
        assert getattr(claimed, field.attname) == getattr(stored, field.attname), field.name
    assert claimed.status == JobStatus.RUNNING and claimed.attempts == 1
    assert claimed.params == {"source": "test", "n": 1} and claimed.backend_pid
    assert not hasattr(claimed, "claim_old_pid")
    # Taken: a second claim gets nothing, and the runner says why.
    assert job_claim(job_kind("ingest"), job.pk, direct=True) is None
    assert job_run(kind_name="ingest", job_id=str(job.pk)) == "finished or held by a live worker"


def test_a_job_runs_with_one_read_of_its_row(team, sent):
    job = _job(team)
    with CaptureQueriesContext(connection) as queries:
        assert job_run(kind_name="ingest", job_id=str(job.pk)) == JobStatus.DONE
    job_reads = [q["sql"] for q in queries
                 if 'FROM "ingest_ingestjob"' in q["sql"] and q["sql"].startswith("SELECT")]
    assert job_reads == []
    assert job_run(kind_name="ingest", job_id=str(job.pk)) == "finished before"
    assert job_run(kind_name="ingest", job_id="00000000-0000-0000-0000-000000000000") == (
        "missing"
    )


def test_a_batch_run_waits_until_due_then_runs_as_the_fair_choice(team, sent):
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=3600,
                              job_class=JobClass.BATCH)
    sent.clear()
    assert job_run(kind_name="ranking_run", job_id=str(run.pk)) == "waiting"
    assert len(sent) == 1 and sent[0][1]["countdown"] > 3500
    RankingRun.objects.filter(pk=run.pk).update(not_before=run.created_at)
    # Due, but batch work: not claimed directly; the message runs the fair choice of a slot.
    assert job_claim(job_kind("ranking_run"), run.pk, direct=True) is None
    assert job_run(kind_name="ranking_run", job_id=str(run.pk)) == JobStatus.DONE
