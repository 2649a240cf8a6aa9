"""Two worker hosts on one PostgreSQL and one broker: one of them is killed (SIGKILL, its whole
process group) in the middle of a mixed load (SBOM uploads, CSV exports, a scheduling replay),
and every job is still done exactly once.

Each worker is a real `celery worker` with a TRUSTRANK_VAR_DIR of its own, as on two hosts;
they share only the database, the broker and the export storage (TRUSTRANK_EXPORT_DIR), which
is what README's "Running on more than one host" asks for. The survivor runs beat (the sweep
that takes back the dead host's jobs once their lease lapses).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bench.sbom_generate import make_bom
from tests.conftest import wait_for
from tests.exports.helpers import body_of, bulk_findings, csv_rows
from tests.replay.helpers import csv_subset
from trustrank.cluster.models import ReplayRun
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent
from trustrank.inventory.models import Component, Sbom
from trustrank.jobs.models import FINISHED, JobStatus

SBOMS = 12
COMPONENTS = 150
EXPORTS = 3
FINDINGS = 400


def _host_env(tmp_path: Path, name: str) -> dict[str, str]:
    var = tmp_path / name
    var.mkdir()
    return {
        "TRUSTRANK_VAR_DIR": str(var),
        "TRUSTRANK_EXPORT_DIR": str(tmp_path / "shared-exports"),
        "TRUSTRANK_EXPORT_STREAM_MAX_ROWS": "50",
        "TRUSTRANK_JOB_LEASE_SECONDS": "3",
        "TRUSTRANK_JOB_HEARTBEAT_SECONDS": "0.5",
        "TRUSTRANK_SWEEP_SECONDS": "1",
        # Each progress report sleeps: every job is long enough to be caught in the middle.
        "TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS": "0.3",
        "TRUSTRANK_JOBS_BATCH_SLOTS": "2",
        # The ranking runs loads ask for stay out of the way.
        "TRUSTRANK_RANKING_DEBOUNCE_SECONDS": "600",
    }


@pytest.mark.e2e
def test_a_worker_host_killed_mid_load_leaves_every_job_done_once(
    transactional_db, team, api, start_worker, settings, tmp_path
):
    settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 50
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "shared-exports"
    bulk_findings(team, FINDINGS)
    pods_csv, nodes_csv = csv_subset(pods=200, nodes=20, tmp=tmp_path)
    survivor = start_worker(beat=True, **_host_env(tmp_path, "host-a"))
    doomed = start_worker(**_host_env(tmp_path, "host-b"))
    assert survivor.proc.pid != doomed.proc.pid

    client = api(team, "sbom:write", "read")
    jobs = []
    for n in range(SBOMS):
        response = client.post(
            f"/api/v1/sboms?projectName=app-{n}&projectVersion=1&autoCreate=true",
            data=make_bom(COMPONENTS, seed=n), content_type="application/json",
        )
        assert response.status_code == 202, response.content
        jobs.append(response.json()["id"])
    exports = []
    for _ in range(EXPORTS):
        response = client.get("/api/v1/exports", {"format": "csv"})
        assert response.status_code == 202, response.content
        exports.append(response.json()["id"])

    # A scheduling replay of an uploaded trace: batch work, like the exports.
    with open(pods_csv, "rb") as pods, open(nodes_csv, "rb") as nodes:
        response = api(team, "admin", "read").post(
            "/api/v1/replay-runs", {"mode": "timeline", "placement": "best_fit",
                                    "compress": 500, "policies": ["static_weight_rr"], "pods": pods,
                                    "nodes": nodes},
            format="multipart")
    assert response.status_code == 202, response.content
    replay = response.json()["id"]

    # Kill host B while it holds a job (its solo pool runs jobs in its main process).
    from ingest.models import IngestJob

    def b_is_mid_job() -> bool:
        mine = f":{doomed.proc.pid}"
        return any(
            model.objects.filter(status=JobStatus.RUNNING, worker__endswith=mine).exists()
            for model in (IngestJob, Export, ReplayRun)
        )

    wait_for(b_is_mid_job, timeout=60, interval=0.05)
    doomed.kill()

    def all_finished() -> bool:
        return (
            IngestJob.objects.filter(pk__in=jobs, status__in=FINISHED).count() == SBOMS
            and Export.objects.filter(pk__in=exports, status__in=FINISHED).count() == EXPORTS
            and ReplayRun.objects.filter(pk=replay, status__in=FINISHED).exists()
        )

    wait_for(all_finished, timeout=240, interval=0.5)

    # Nothing lost: every job done, none failed.
    ingest = list(IngestJob.objects.filter(pk__in=jobs).values("pk", "status", "attempts", "error"))
    assert all(j["status"] == JobStatus.DONE for j in ingest), ingest
    assert all(e.status == JobStatus.DONE for e in Export.objects.filter(pk__in=exports))
    # The killed host's job was taken over: some job needed a second attempt.
    run = ReplayRun.objects.get(pk=replay)
    assert run.status == JobStatus.DONE and run.result, (run.status, run.error)
    attempts = [j["attempts"] for j in ingest] + [run.attempts] + list(
        Export.objects.filter(pk__in=exports).values_list("attempts", flat=True)
    )
    assert max(attempts) >= 2, attempts

    # Nothing twice: one SBOM per upload job, each with its components once.
    assert Sbom.objects.count() == SBOMS
    for sbom in Sbom.objects.all():
        assert str(sbom.job_id) in {str(j) for j in jobs}
        components = Component.objects.filter(sbom=sbom)
        assert components.count() == COMPONENTS == sbom.component_count
        assert components.values("bom_ref").distinct().count() == COMPONENTS
        # Matched in its job's transaction: a done upload is never left unmatched.
        assert sbom.matched_at is not None, sbom.pk
    assert Sbom.objects.values("job_id").distinct().count() == SBOMS

    # Each export: one file in the shared storage, its rows once, one audit event.
    folder = tmp_path / "shared-exports" / str(team.pk)
    assert not list(folder.glob("*.part"))
    for export_id in exports:
        status = client.get(f"/api/v1/exports/{export_id}").json()
        download = client.get(status["download_url"])
        assert download.status_code == 200
        data = body_of(download)
        assert hashlib.sha256(data).hexdigest() == status["sha256"]
        rows = csv_rows(data)
        assert len(rows) == FINDINGS
        assert len({r["finding_id"] for r in rows}) == FINDINGS
        assert AuditEvent.objects.filter(action="export", subject_id=str(export_id)).count() == 1
        assert len(list(folder.glob(f"{export_id}-*"))) == 1
