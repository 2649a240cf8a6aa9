"""A worker killed (SIGKILL, its whole process group) at any moment of any kind of job: the
sweep queues the job again, a second worker finishes it, and the result is as if it ran once
(nothing lost, nothing twice, no stale .part file). A dead claimant's PostgreSQL backend
never blocks the next attempt, and a job whose worker dies every time ends failed, clearly.

Real `celery worker` processes on the test database; jobs are asked for through the API.
TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS makes each progress report of the first worker
sleep, so the test can kill it in the middle of the job.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.db import connection
from django.utils import timezone

from bench.sbom_generate import make_bom
from ingest.models import IngestJob
from tests.conftest import wait_for
from tests.exports.helpers import body_of, bulk_findings, csv_rows
from tests.findings.helpers import many_findings
from tests.replay.helpers import csv_subset
from tests.runtime.helpers import shop
from tests.vulns.helpers import osv
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, BulkTriageJob
from trustrank.findings.services.bulk import bulk_triage_job_run
from trustrank.inventory.models import Component, Sbom
from trustrank.jobs import registry, runner
from trustrank.jobs.claim import job_claim
from trustrank.jobs.errors import JobRejected, JobTransient
from trustrank.jobs.models import FINISHED, JobStatus
from trustrank.jobs.registry import JobKind, job_kind
from trustrank.jobs.runner import job_run
from trustrank.jobs.sweep import jobs_sweep
from trustrank.parsers.otlp_span_columns import spans_from_protobuf
from trustrank.ranking.models import RankedFinding, RankingRun
from trustrank.runtime import engine_columns
from trustrank.runtime.models import (
    CallEdgeBucket,
    LibraryBucket,
    OpenClientSpan,
    PendingServerSpan,
)
from trustrank.vulns.models import Advisory, AdvisoryPackage

LEASE = 3
# Each progress report of the first worker sleeps this long: the test's window to kill it.
SLOW = "1.0"


@dataclass
class Ctx:
    team: Any
    api: Callable[..., Any]
    settings: Any
    export_dir: Path
    tmp_path: Path
    state: dict[str, Any] = field(default_factory=dict)


def worker_env(ctx: Ctx) -> dict[str, str]:
    return {
        "TRUSTRANK_JOB_LEASE_SECONDS": str(LEASE),
        "TRUSTRANK_JOB_HEARTBEAT_SECONDS": "0.5",
        "TRUSTRANK_EXPORT_DIR": str(ctx.export_dir),
        "TRUSTRANK_EXPORT_STREAM_MAX_ROWS": "100",
        "TRUSTRANK_BULK_TRIAGE_SYNC_MAX": "100",
        # The ranking runs other work asks for (after a load) stay out of the way.
        "TRUSTRANK_RANKING_DEBOUNCE_SECONDS": "600",
        # A trace export of a few dozen kilobytes is aggregated in many parts.
        "TRUSTRANK_TRACE_PART_BYTES": "4096",
    }


@dataclass(frozen=True)
class Case:
    """One kind of job: its data, how it is asked for, when it is mid-job, and what a right
    result is."""

    kind: str  # the job kind (trustrank.jobs.registry)
    prepare: Callable[[Ctx], None]
    submit: Callable[[Ctx], Any]
    mid_job: Callable[[Ctx, Any], bool]
    at_kill: Callable[[Ctx, Any], None]
    check: Callable[[Ctx, Any], None]


# --- ingest: an SBOM of a few hundred components (atomic: nothing is kept from a dead attempt)

SBOM_COMPONENTS = 300


def ingest_prepare(ctx: Ctx) -> None:
    ctx.state["bom"] = make_bom(SBOM_COMPONENTS)


def ingest_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "sbom:write", "read")
    response = client.post(
        "/api/v1/sboms?projectName=killed&projectVersion=1&autoCreate=true",
        data=ctx.state["bom"], content_type="application/json",
    )
    assert response.status_code == 202, response.content
    return response.json()["id"]


def ingest_mid_job(ctx: Ctx, row: Any) -> bool:
    # Both phases run inside the job's transaction, after the components were copied in.
    return row.phase in ("storing components", "storing dependencies")


def ingest_at_kill(ctx: Ctx, row: Any) -> None:
    assert not Sbom.objects.exists() and not Component.objects.exists()


def ingest_check(ctx: Ctx, row: Any) -> None:
    job = ctx.state["client"].get(f"/api/v1/jobs/{row.pk}").json()
    assert job["status"] == "done" and job["attempts"] == 2
    assert job["counts"]["components"] == SBOM_COMPONENTS
    sbom = Sbom.objects.get()
    assert sbom.component_count == SBOM_COMPONENTS
    components = Component.objects.filter(sbom=sbom)
    assert components.count() == SBOM_COMPONENTS
    assert components.values("bom_ref").distinct().count() == SBOM_COMPONENTS
    assert Component.objects.count() == SBOM_COMPONENTS


# --- ingest of an OSV feed: the streaming path (batches committed one by one), killed after
# the last batch, while it matches findings

OSV_RECORDS = 1200


def osv_prepare(ctx: Ctx) -> None:
    ctx.state["feed"] = orjson.dumps([
        osv(f"GHSA-kill-{i:04d}", "npm", f"pkg-killed-{i}", [{"introduced": "0"}, {"fixed": "2.0.0"}])
        for i in range(OSV_RECORDS)
    ])


def osv_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "feeds:write", "read")
    response = client.post("/api/v1/feeds/osv", ctx.state["feed"],
                           content_type="application/json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def osv_mid_job(ctx: Ctx, row: Any) -> bool:
    return row.phase == "matching"


def osv_at_kill(ctx: Ctx, row: Any) -> None:
    assert Advisory.objects.count() == OSV_RECORDS  # every batch was committed


def osv_check(ctx: Ctx, row: Any) -> None:
    job = ctx.state["client"].get(f"/api/v1/jobs/{row.pk}").json()
    assert job["status"] == "done" and job["attempts"] == 2
    assert Advisory.objects.count() == OSV_RECORDS
    packages = AdvisoryPackage.objects.all()
    assert packages.count() == OSV_RECORDS
    assert packages.values("advisory_id", "ecosystem", "name").distinct().count() == OSV_RECORDS
    events = AuditEvent.objects.filter(action="feed_imported", subject_id=str(row.pk))
    assert events.count() == 1
    # Every record counted once. (Which of `inserted` and `updated` it is counted as is the
    # last attempt's view: it re-writes what the dead one inserted, so it says `updated`.)
    counts = job["counts"]
    assert counts["records"] == OSV_RECORDS and counts["unchanged"] == 0
    assert counts["inserted"] + counts["updated"] == OSV_RECORDS, counts


# --- ingest of an OTLP trace export: aggregated part by part in the job's transaction,
# killed after some parts were stored (appended partial rows, spans waiting for their other
# half); the next attempt must neither lose nor double any call or library evidence


def traces_prepare(ctx: Ctx) -> None:
    ctx.state["body"] = shop(21, traces=40).body()


def traces_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "traces:write", "read")
    response = client.generic("POST", "/v1/traces", ctx.state["body"],
                              content_type="application/x-protobuf")
    assert response.status_code == 200, response.content
    return IngestJob.objects.get(team=ctx.team, kind="traces").pk


def traces_mid_job(ctx: Ctx, row: Any) -> bool:
    return row.phase == "aggregating" and (row.progress_done or 0) > 0


def traces_at_kill(ctx: Ctx, row: Any) -> None:
    # Parts were stored in the job's transaction, which died with the worker.
    assert not CallEdgeBucket.objects.exists() and not LibraryBucket.objects.exists()
    assert not PendingServerSpan.objects.exists() and not OpenClientSpan.objects.exists()


def traces_check(ctx: Ctx, row: Any) -> None:
    job = ctx.state["client"].get(f"/api/v1/jobs/{row.pk}").json()
    assert job["status"] == "done" and job["attempts"] == 2
    resources = spans_from_protobuf(ctx.state["body"]).resources
    reference = engine_columns.aggregate(resources, bucket_seconds=60)
    assert job["counts"]["spans"] == reference.spans
    # Whatever part each half of a call came in, every call is counted once.
    expected_edges: Counter[tuple[str, str]] = Counter()
    for (_env, caller, callee, _bucket), stat in reference.edges.items():
        expected_edges[caller[2], callee[2]] += stat.calls
    edges: Counter[tuple[str, str]] = Counter()
    for b in CallEdgeBucket.objects.select_related("caller", "callee"):
        edges[b.caller.name, b.callee.name] += b.calls
    assert edges == expected_edges
    expected_libraries: Counter[tuple[str, str]] = Counter()
    for (_env, _service, _bucket, kind, name, _version), spans in reference.libraries.items():
        expected_libraries[kind, name] += spans
    libraries: Counter[tuple[str, str]] = Counter()
    for lib in LibraryBucket.objects.all():
        libraries[lib.kind, lib.name] += lib.spans
    assert libraries == expected_libraries
    assert libraries["java_frame", "org.apache.logging.log4j.core.Logger.log"] > 0


# --- bulk triage: 1,200 findings, three committed batches (a new attempt goes on from the
# cursor: no finding changes twice)

BULK_FINDINGS = 1200


def bulk_prepare(ctx: Ctx) -> None:
    ctx.settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 100
    ctx.state["ids"] = many_findings(ctx.team, BULK_FINDINGS, prefix="kill")


def bulk_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "read", "triage")
    response = client.post("/api/v1/findings/bulk-triage", {
        "ids": ctx.state["ids"], "state": "exploitable", "reason": "reachable from the edge",
    }, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def bulk_mid_job(ctx: Ctx, row: Any) -> bool:
    return row.progress_done >= 500  # the first batch is committed


def bulk_at_kill(ctx: Ctx, row: Any) -> None:
    changed = Finding.objects.filter(pk__in=ctx.state["ids"], version=2).count()
    assert 0 < changed < BULK_FINDINGS
    assert changed == row.progress_done


def bulk_check(ctx: Ctx, row: Any) -> None:
    ids = ctx.state["ids"]
    status = ctx.state["client"].get(f"/api/v1/findings/bulk-triage/{row.pk}").json()
    assert status["status"] == "done" and status["progress_done"] == BULK_FINDINGS
    assert status["counts"]["changed"] == BULK_FINDINGS
    # Changed once each: one version step, one audit event.
    assert Finding.objects.filter(pk__in=ids, state="exploitable", version=2).count() == len(ids)
    per_finding = AuditEvent.objects.filter(action="bulk_triaged", subject_id=f"job-{row.pk}")
    assert per_finding.count() == len(ids)
    assert per_finding.values("finding_id").distinct().count() == len(ids)
    summary = AuditEvent.objects.filter(action="bulk_triage", subject_id=f"job-{row.pk}")
    assert summary.count() == 1
    assert summary.get().after["counts"]["changed"] == BULK_FINDINGS


# --- ranking run: a team's open findings (the queue and the run's status commit together)

RANK_FINDINGS = 300


def ranking_prepare(ctx: Ctx) -> None:
    ctx.state["ids"] = many_findings(ctx.team, RANK_FINDINGS, prefix="rank")


def ranking_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "read", "triage")
    response = client.post("/api/v1/ranking-runs", {}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def ranking_mid_job(ctx: Ctx, row: Any) -> bool:
    # Inside the transaction that stores the queue, after the ranks were written.
    return row.phase == "due dates"


def ranking_at_kill(ctx: Ctx, row: Any) -> None:
    assert not RankedFinding.objects.filter(team=ctx.team).exists()


def ranking_check(ctx: Ctx, row: Any) -> None:
    detail = ctx.state["client"].get(f"/api/v1/ranking-runs/{row.pk}").json()
    assert detail["status"] == "done" and detail["counts"]["findings"] == RANK_FINDINGS
    ranked = RankedFinding.objects.filter(team=ctx.team)
    assert set(ranked.values_list("finding_id", flat=True)) == set(ctx.state["ids"])
    assert sorted(ranked.values_list("rank", flat=True)) == list(range(1, RANK_FINDINGS + 1))
    assert all(r == row.pk for r in ranked.values_list("run_id", flat=True))
    assert RankingRun.objects.filter(team=ctx.team, status=JobStatus.DONE).count() == 1


# --- replay run: a small uploaded trace (nothing is stored before the end)


def replay_prepare(ctx: Ctx) -> None:
    ctx.state["csv"] = csv_subset(pods=1500, nodes=60, tmp=ctx.tmp_path)


def replay_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "admin", "read")
    pods, nodes = ctx.state["csv"]
    with pods.open("rb") as p, nodes.open("rb") as n:
        response = client.post("/api/v1/replay-runs", {
            "mode": "inflation", "seeds": 3, "strategies": ["best_fit", "fgd"],
            "pods": p, "nodes": n,
        }, format="multipart")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def replay_mid_job(ctx: Ctx, row: Any) -> bool:
    return row.progress_done >= 1


def replay_at_kill(ctx: Ctx, row: Any) -> None:
    assert not row.result


def replay_check(ctx: Ctx, row: Any) -> None:
    detail = ctx.state["client"].get(f"/api/v1/replay-runs/{row.pk}").json()
    assert detail["status"] == "done"
    assert set(row.result["strategies"]) == {"best_fit", "fgd"}
    assert row.result["seeds"] == 3 and row.result["trace"]["pods"] == 1500
    assert row.progress_done == row.progress_total == 6  # two strategies, three seeds


# --- export: 2,500 rows written by the worker to a .part file, renamed when complete

EXPORT_ROWS = 2500


def export_prepare(ctx: Ctx) -> None:
    ctx.settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 100
    ctx.settings.TRUSTRANK_EXPORT_DIR = ctx.export_dir
    bulk_findings(ctx.team, EXPORT_ROWS)


def export_submit(ctx: Ctx) -> Any:
    ctx.state["client"] = client = ctx.api(ctx.team, "read")
    response = client.get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 202, response.content
    return response.json()["id"]


def export_mid_job(ctx: Ctx, row: Any) -> bool:
    return row.progress_done >= 1000


def export_at_kill(ctx: Ctx, row: Any) -> None:
    assert [p.name for p in ctx.export_dir.rglob("*") if p.is_file()] == [
        f"{row.pk}.{row.attempts}.part"
    ]


def export_check(ctx: Ctx, row: Any) -> None:
    client = ctx.state["client"]
    status = client.get(f"/api/v1/exports/{row.pk}").json()
    assert status["status"] == "done" and status["rows"] == EXPORT_ROWS
    data = body_of(client.get(status["download_url"]))
    assert hashlib.sha256(data).hexdigest() == status["sha256"] == row.sha256
    assert len(csv_rows(data)) == EXPORT_ROWS
    events = AuditEvent.objects.filter(action="export", subject_id=str(row.pk))
    assert events.count() == 1 and events.get().after["sha256"] == row.sha256
    # Only the finished file: no .part, no file of the dead attempt.
    files = [p for p in ctx.export_dir.rglob("*") if p.is_file()]
    assert [str(p.relative_to(ctx.export_dir)) for p in files] == [row.file_path]


CASES = {
    "ingest": Case(
        "ingest", ingest_prepare, ingest_submit, ingest_mid_job, ingest_at_kill, ingest_check
    ),
    "ingest_osv": Case("ingest", osv_prepare, osv_submit, osv_mid_job, osv_at_kill, osv_check),
    "ingest_traces": Case(
        "ingest", traces_prepare, traces_submit, traces_mid_job, traces_at_kill, traces_check
    ),
    "bulk_triage": Case(
        "bulk_triage", bulk_prepare, bulk_submit, bulk_mid_job, bulk_at_kill, bulk_check
    ),
    "ranking_run": Case(
        "ranking_run",
        ranking_prepare, ranking_submit, ranking_mid_job, ranking_at_kill, ranking_check,
    ),
    "replay_run": Case(
        "replay_run", replay_prepare, replay_submit, replay_mid_job, replay_at_kill, replay_check
    ),
    "export": Case(
        "export", export_prepare, export_submit, export_mid_job, export_at_kill, export_check
    ),
}


@pytest.fixture
def ctx(team: Any, api: Any, settings: Any, tmp_path: Path) -> Ctx:
    return Ctx(team=team, api=api, settings=settings, export_dir=tmp_path / "exports",
               tmp_path=tmp_path)


def _row(model: Any, job_id: Any) -> Any:
    return model.objects.get(pk=job_id)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", list(CASES))
def test_a_job_whose_worker_is_killed_finishes_once_after_the_sweep(
    kind: str, ctx: Ctx, start_worker: Any
) -> None:
    case = CASES[kind]
    model = job_kind(case.kind).model
    env = worker_env(ctx)
    case.prepare(ctx)
    first = start_worker(TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS=SLOW, **env)
    job_id = case.submit(ctx)

    def mid_job() -> Any:
        row = _row(model, job_id)
        assert row.status not in FINISHED, (row.status, row.phase, row.error)
        return row if row.status == JobStatus.RUNNING and case.mid_job(ctx, row) else None

    wait_for(mid_job, timeout=30, interval=0.05)
    first.kill()
    row = _row(model, job_id)
    assert row.status == JobStatus.RUNNING and row.attempts == 1, (row.status, row.phase)
    case.at_kill(ctx, row)

    # A second worker with the sweep (every second) finds the lapsed lease and runs it again.
    start_worker(beat=True, TRUSTRANK_SWEEP_SECONDS="1", **env)
    wait_for(lambda: _row(model, job_id).status in FINISHED, timeout=40, interval=0.2)
    row = _row(model, job_id)
    assert row.status == JobStatus.DONE, row.error
    assert row.attempts == 2 and row.lease_until is None and row.backend_pid is None
    case.check(ctx, row)


# --- A dead claimant's PostgreSQL work --------------------------------------------------------


def _sleeping_backend(ids: list[int]) -> tuple[Any, int, Any, threading.Thread]:
    """What a killed worker can leave behind: a backend in the middle of a long statement,
    holding row locks the job needs, that will not notice for a long time that its client is
    gone. Returns (connection, pid, backend_start, the thread running the statement)."""
    raw = connection.get_new_connection(connection.get_connection_params())
    cur = raw.cursor()
    cur.execute("SELECT id FROM findings_finding WHERE id = ANY(%s) FOR UPDATE", [ids])
    cur.execute(
        "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    )
    pid, started = cur.fetchone()

    def sleep() -> None:
        # Ended by the sweep or by the new claimant: what the test wants.
        with contextlib.suppress(Exception):
            cur.execute("SELECT pg_sleep(600)")

    thread = threading.Thread(target=sleep, daemon=True)
    thread.start()
    # The statement has started (and holds its locks) before the test goes on.
    with connection.cursor() as check:
        wait_for(lambda: (check.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND query LIKE %s",
            [pid, "%pg_sleep%"]), check.fetchone())[1], timeout=10)
    return raw, pid, started, thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("recovery", ["sweep", "claim"])
def test_a_dead_claimants_backend_never_blocks_the_next_attempt(
    recovery: str, team: Any, api: Any, settings: Any
) -> None:
    settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 5
    # Long enough that waiting behind the dead backend's locks would fail this test.
    settings.TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS = 60
    ids = many_findings(team, 20, prefix="lock")
    response = api(team, "read", "triage").post("/api/v1/findings/bulk-triage", {
        "ids": ids, "state": "exploitable", "reason": "reachable"}, format="json")
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    raw, pid, started, thread = _sleeping_backend(ids)
    try:
        # The job's first claimant was that backend's worker; it died, its lease lapsed.
        BulkTriageJob.objects.filter(pk=job_id).update(
            status=JobStatus.RUNNING, attempts=1, started_at=timezone.now(),
            lease_until=timezone.now() - timedelta(seconds=5),
            backend_pid=pid, backend_start=started,
        )
        began = time.monotonic()
        if recovery == "sweep":
            assert jobs_sweep()["backends_ended"] == 1
        assert bulk_triage_job_run(job_id=job_id) == "done"
        assert time.monotonic() - began < 10
        thread.join(10)
        assert not thread.is_alive()
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            assert cur.fetchone()[0] == 0
    finally:
        raw.close()
    job = BulkTriageJob.objects.get(pk=job_id)
    assert job.status == JobStatus.DONE and job.attempts == 2 and job.counts["changed"] == 20
    assert Finding.objects.filter(pk__in=ids, state="exploitable", version=2).count() == 20
    assert AuditEvent.objects.filter(action="bulk_triaged", subject_id=f"job-{job_id}").count() == 20


@pytest.mark.django_db(transaction=True)
def test_an_export_whose_worker_died_after_renaming_its_file_leaves_no_orphan(
    team: Any, api: Any, settings: Any, tmp_path: Path
) -> None:
    """The one moment of an export no progress report reaches: the file is complete and
    renamed, the row is not yet done. The next attempt writes a new file; the dead one's must
    not stay on disk with no row naming it."""
    settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 10
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "exports"
    bulk_findings(team, 50)
    response = api(team, "read").get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 202, response.content
    export_id = response.json()["id"]
    kind = job_kind("export")
    dead = job_claim(kind, export_id)
    assert dead is not None
    orphan = tmp_path / "exports" / str(team.pk) / f"{export_id}-0123456789abcdef.csv"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"what the dead attempt wrote")
    kind.model.objects.filter(pk=export_id).update(
        lease_until=timezone.now() - timedelta(seconds=1)
    )
    assert jobs_sweep()["requeued"] == 1
    assert not orphan.exists()
    assert job_run(kind_name="export", job_id=str(export_id)) == "done"
    row = kind.model.objects.get(pk=export_id)
    files = [p for p in (tmp_path / "exports").rglob("*") if p.is_file()]
    assert [str(p.relative_to(tmp_path / "exports")) for p in files] == [row.file_path]
    assert row.rows == 50 and row.attempts == 2


# --- The job's session ------------------------------------------------------------------------

SESSION_SETTINGS = ("statement_timeout", "lock_timeout", "client_connection_check_interval")


def _session_settings() -> dict[str, str]:
    with connection.cursor() as cur:
        out = {}
        for name in SESSION_SETTINGS:
            cur.execute(f"SHOW {name}")
            out[name] = cur.fetchone()[0]
        return out


PROBE_ERRORS: dict[str, type[Exception]] = {
    "crash": RuntimeError, "reject": JobRejected, "transient": JobTransient,
}


def session_probe(*, job: Any, progress: Any) -> dict[str, Any]:
    """A handler that reports the session it runs in (and ends as `job.reason` says)."""
    seen = _session_settings()
    if job.reason in PROBE_ERRORS:
        raise PROBE_ERRORS[job.reason]("the probe crashed on purpose")
    return {"counts": seen}


def _probe_kind(monkeypatch: pytest.MonkeyPatch, *, atomic: bool = False) -> JobKind:
    kind = JobKind(name="session_probe", model_path="findings.BulkTriageJob",
                   handler=f"{__name__}.session_probe", atomic=atomic)
    monkeypatch.setitem(registry._KINDS, kind.name, kind)
    return kind


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("atomic", "outcome"), [
    (False, "done"), (True, "done"), (False, "failed"), (True, "failed"),
])
def test_a_handler_runs_with_the_jobs_timeouts_and_they_are_reset_after(
    atomic: bool, outcome: str, team: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.TRUSTRANK_JOB_STATEMENT_TIMEOUT_SECONDS = 7
    settings.TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS = 3
    _probe_kind(monkeypatch, atomic=atomic)
    job = BulkTriageJob.objects.create(
        team=team, team_ids=[team.pk], changes={}, reason="crash" if outcome == "failed" else "",
    )
    before = _session_settings()
    assert before["statement_timeout"] == "0" and before["lock_timeout"] == "0"
    assert job_run(kind_name="session_probe", job_id=str(job.pk)) == outcome
    job.refresh_from_db()
    assert job.status == outcome
    if outcome == "done":
        assert job.counts == {
            "statement_timeout": "7s", "lock_timeout": "3s",
            "client_connection_check_interval": "2s",
        }
    else:
        assert "the probe crashed on purpose" in job.error
    # The connection serves the worker's next task as it was.
    assert _session_settings() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("failure", "max_attempts"), [
    ("crash", 5), ("reject", 5), ("transient", 5), ("transient", 1),
])
def test_an_attempt_taken_over_cannot_fail_nor_requeue_the_job_of_the_next(
    failure: str, max_attempts: int, team: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that was frozen (not dead) past its lease wakes up after the sweep gave its
    job to another worker: whatever its attempt ends with stays its own."""
    settings.TRUSTRANK_JOB_MAX_ATTEMPTS = max_attempts
    kind = _probe_kind(monkeypatch)
    job = BulkTriageJob.objects.create(team=team, team_ids=[team.pk], changes={}, reason=failure)
    stale = job_claim(kind, job.pk)
    BulkTriageJob.objects.filter(pk=job.pk).update(
        lease_until=timezone.now() - timedelta(seconds=1)
    )
    newer = job_claim(kind, job.pk)
    assert stale is not None and newer is not None and newer.attempts == 2
    assert runner._execute(kind, stale) == "taken over"
    row = BulkTriageJob.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.error) == (JobStatus.RUNNING, 2, "")
    assert row.lease_until is not None and row.backend_pid == newer.backend_pid


# --- A job whose worker dies every time -------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_worker_dies_every_time_fails_clearly_and_blocks_nothing(
    ctx: Ctx, start_worker: Any
) -> None:
    ctx.settings.TRUSTRANK_JOB_MAX_ATTEMPTS = 2
    case = CASES["export"]
    case.prepare(ctx)
    env = {**worker_env(ctx), "TRUSTRANK_JOB_MAX_ATTEMPTS": "2"}
    job_id = case.submit(ctx)
    def part_of(attempt: int) -> Any:
        return ctx.export_dir / str(ctx.team.pk) / f"{job_id}.{attempt}.part"

    def writing(attempt: int) -> bool:
        part = part_of(attempt)
        # Not the row's progress: the second attempt starts with the first one's count. The
        # dead attempt's .part is removed before the next starts, so this one is its own.
        row = _row(job_kind("export").model, job_id)
        return (row.attempts == attempt and row.status == JobStatus.RUNNING
                and part.exists() and part.stat().st_size > 0)

    for attempt in (1, 2):
        worker = start_worker(TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS=SLOW, **env)
        wait_for(lambda a=attempt: writing(a), timeout=30, interval=0.05)
        worker.kill()
        assert part_of(attempt).exists()
        # The sweep, run here: it re-queues the job after its lease lapsed, then gives up.
        wait_for(lambda: jobs_sweep() and _row(job_kind("export").model, job_id).status
                 != JobStatus.RUNNING, timeout=LEASE + 10, interval=0.5)
    row = _row(job_kind("export").model, job_id)
    assert row.status == JobStatus.FAILED and row.attempts == 2
    assert row.error == "gave up after 2 attempts: the worker stopped each time"
    assert row.lease_until is None and row.backend_pid is None and row.finished_at
    assert not [p for p in ctx.export_dir.rglob("*") if p.is_file()]
    assert not AuditEvent.objects.filter(action="export", subject_id=str(job_id)).exists()
    status = ctx.state["client"].get(f"/api/v1/exports/{job_id}").json()
    assert status["status"] == "failed" and "gave up after 2 attempts" in status["error"]
    # Nothing stuck: the batch slot is free, the team's next export runs at once.
    start_worker(**env)
    next_id = case.submit(ctx)
    wait_for(lambda: _row(job_kind("export").model, next_id).status in FINISHED, timeout=40)
    row = _row(job_kind("export").model, next_id)
    assert row.status == JobStatus.DONE and row.attempts == 1, row.error
    assert row.rows == EXPORT_ROWS
