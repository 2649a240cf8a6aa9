"""A bulk triage too large for the request runs as a job on a real Celery worker: 202 with a
status URL, progress in batches, one audit event per finding and a summary event."""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_for
from tests.findings.helpers import many_findings
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, BulkTriageJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_bulk_triage_of_1200_findings_runs_as_a_job_with_progress(
    api, team, other_team, make_user, celery_worker, settings
):
    settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 500
    owner = make_user("owner", team=team)
    ids = many_findings(team, 1200, prefix="job")
    theirs = many_findings(other_team, 50, prefix="job")
    client = api(team, "read", "triage")
    r = client.post("/api/v1/findings/bulk-triage", {
        "filter": {"q": "pkg-job-"}, "state": "exploitable", "assignee": owner.pk,
        "reason": "every pkg-job finding is reachable",
    }, format="json")
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status_url"] == f"/api/v1/findings/bulk-triage/{body['id']}"
    assert r["Location"] == body["status_url"]
    assert body["progress_total"] == 1200

    seen_progress: set[int] = set()

    def finished() -> dict | None:
        status = client.get(body["status_url"]).json()
        seen_progress.add(status["progress_done"])
        return status if status["status"] in ("done", "failed") else None

    status = wait_for(finished, timeout=120, interval=0.05)
    assert status["status"] == "done", status
    assert status["progress_done"] == status["progress_total"] == 1200
    assert status["counts"]["changed"] == 1200 and status["counts"]["conflicts"] == 0
    job = BulkTriageJob.objects.get(pk=body["id"])
    assert job.started_at and job.finished_at and job.cursor == ids[-1]

    assert Finding.objects.filter(pk__in=ids, state="exploitable", assignee=owner,
                                  version=2).count() == 1200
    assert not Finding.objects.filter(pk__in=theirs).exclude(state="in_triage").exists()
    per_finding = AuditEvent.objects.filter(action="bulk_triaged", subject_id=f"job-{job.pk}")
    assert per_finding.count() == 1200
    assert set(per_finding.values_list("finding_id", flat=True)) == set(ids)
    summary = AuditEvent.objects.filter(action="bulk_triage", subject_id=f"job-{job.pk}")
    assert summary.count() == 1 and summary.get().team_id == team.pk
    assert summary.get().after["counts"]["changed"] == 1200

    # Another team cannot read the job.
    assert api(other_team, "read").get(body["status_url"]).status_code == 404


def test_a_second_delivery_of_the_job_changes_nothing_twice(api, team, settings):
    """The task is idempotent: running the finished job again writes no event."""
    from trustrank.findings.services.bulk import bulk_triage_job_run

    settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 10
    ids = many_findings(team, 25, prefix="twice")
    r = api(team, "read", "triage").post("/api/v1/findings/bulk-triage", {
        "ids": ids, "state": "false_positive", "reason": "noise"}, format="json")
    assert r.status_code == 202
    job_id = r.json()["id"]
    started = time.monotonic()
    assert bulk_triage_job_run(job_id=job_id) == "done"
    assert bulk_triage_job_run(job_id=job_id) == "finished before"
    assert time.monotonic() - started < 30
    assert AuditEvent.objects.filter(action="bulk_triaged").count() == 25
    assert AuditEvent.objects.filter(action="bulk_triage").count() == 1
    job = BulkTriageJob.objects.get(pk=job_id)
    assert job.progress_done == 25 and job.counts["changed"] == 25
