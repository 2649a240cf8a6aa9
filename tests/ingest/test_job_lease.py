"""A running job renews its lease while it works, so the sweep never re-queues it and a
second worker never runs it at the same time; its phase and progress move while it runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ingest import services
from ingest.handlers import Handler
from ingest.models import IngestJob, JobStatus
from ingest.services import job_create, job_run
from tests.ingest import slow_handler
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.jobs.claim import job_claim
from trustrank.jobs.registry import job_kind
from trustrank.jobs.sweep import jobs_sweep


@pytest.fixture
def slow_jobs(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.TRUSTRANK_JOB_LEASE_SECONDS = 1
    settings.TRUSTRANK_JOB_HEARTBEAT_SECONDS = 0.2
    slow_handler.RUNS.clear()
    slow_handler.STARTED.clear()
    sent: list[Any] = []
    monkeypatch.setattr(
        "trustrank.jobs.tasks.jobs_run.apply_async", lambda *a, **kw: sent.append((a, kw))
    )
    for atomic in (True, False):
        kind = "sbom" if atomic else "osv"
        monkeypatch.setitem(
            services.HANDLERS, kind, Handler("tests.ingest.slow_handler.slow_job", atomic=atomic)
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["sbom", "osv"])  # an atomic and a streaming handler
def test_a_live_job_is_never_requeued_nor_run_twice(team, slow_jobs, kind):
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    job = job_create(team=team, kind=kind, payload=b"x", principal=principal, params={})
    first = threading.Thread(target=job_run, kwargs={"job_id": str(job.pk)})
    first.start()
    assert slow_handler.STARTED.wait(10)
    phases: set[tuple[str, int]] = set()
    try:
        # Three leases long: without renewal the lease lapses after one.
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert jobs_sweep()["requeued"] == 0
            job_run(job_id=str(job.pk))  # a second worker, given the job by a stray message
            row = IngestJob.objects.get(pk=job.pk)
            assert row.status == JobStatus.RUNNING
            phases.add((row.phase, row.progress_done))
            time.sleep(0.2)
    finally:
        first.join(20)
    assert [str(job.pk)] == slow_handler.RUNS
    row = IngestJob.objects.get(pk=job.pk)
    assert row.status == JobStatus.DONE and row.attempts == 1
    # Progress was visible while it ran, and it moved.
    assert len({done for phase, done in phases if phase == "working"}) >= 3, phases


@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_job_is_still_requeued(team, slow_jobs):
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    job = job_create(team=team, kind="sbom", payload=b"x", principal=principal, params={})
    assert job_claim(job_kind("ingest"), str(job.pk)) is not None  # claimed, then the worker died
    time.sleep(1.3)
    assert jobs_sweep()["requeued"] == 1
