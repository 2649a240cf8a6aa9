"""SBOM ingestion end to end: HTTP → PostgreSQL → a real Celery worker process → API and page.

No eager mode: each test starts `celery worker` subprocesses on this run's queues.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from bench.sbom_generate import make_bom
from ingest.models import IngestJob, IngestPayload, JobStatus
from tests.conftest import DATA, wait_for
from trustrank.inventory.models import Component, Sbom

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

KEYCLOAK = (DATA / "sbom" / "cdx-1.2_maven_keycloak-10.0.2.json").read_bytes()


def job_status(job_id: str) -> str:
    return IngestJob.objects.values_list("status", flat=True).get(pk=job_id)


def finished(job_id: str) -> str | None:
    status = job_status(job_id)
    return status if status in (JobStatus.DONE, JobStatus.FAILED) else None


def test_uploaded_sbom_is_ingested_by_a_worker_and_served(
    team, api, make_user, client, celery_worker
):
    uploader = api(team, "sbom:write", "read")
    response = uploader.post(
        "/api/v1/sboms?projectName=keycloak&projectVersion=10.0.2&autoCreate=true",
        data=KEYCLOAK,
        content_type="application/json",
    )
    assert response.status_code == 202
    job_id = response.json()["id"]
    assert wait_for(lambda: finished(job_id), timeout=60) == JobStatus.DONE
    job = uploader.get(f"/api/v1/jobs/{job_id}").json()
    assert job["counts"]["components"] == 903
    assert job["finished_at"] and job["attempts"] == 1

    projects = uploader.get("/api/v1/projects").json()
    assert projects["count"] == 1
    project_id = projects["results"][0]["id"]
    components = uploader.get(f"/api/v1/projects/{project_id}/components").json()
    assert components["count"] == 903
    found = uploader.get(
        f"/api/v1/projects/{project_id}/components?q=pkg:maven/org.keycloak"
    ).json()
    assert 0 < found["count"] < 903
    assert all("org.keycloak" in c["purl"] for c in found["results"])

    user = make_user("alice", team=team)
    client.force_login(user)
    page = client.get(f"/projects/{project_id}/?q=keycloak-core")
    assert page.status_code == 200
    assert b"keycloak-core" in page.content


def test_dependency_track_client_flow(team, api, celery_worker):
    """What cdxgen --server-url and the DT CI plugins do: PUT, then poll the token."""
    import base64
    import json

    client = api(team, "sbom:write")
    token = client.put(
        "/api/v1/bom",
        data=json.dumps(
            {
                "projectName": "dt",
                "projectVersion": "1",
                "autoCreate": "true",
                "bom": base64.b64encode(KEYCLOAK).decode(),
            }
        ),
        content_type="application/json",
    ).json()["token"]
    wait_for(lambda: client.get(f"/api/v1/event/token/{token}").json() == {"processing": False})
    assert Sbom.objects.get().component_count == 903


def test_invalid_payload_in_the_queue_fails_the_job_and_others_go_on(team, api, celery_worker):
    """Bad input reaching the worker (bypassing the receiver's check) fails only its job."""
    from ingest.services import job_create
    from trustrank.accounts.principal import principal_for_key
    from trustrank.accounts.services import api_key_issue

    principal = principal_for_key(api_key_issue(team=team, name="t", scopes=["sbom:write"]).api_key)
    bad = job_create(
        team=team,
        kind="sbom",
        payload=b"<bom/>",
        principal=principal,
        params={"projectName": "x", "autoCreate": True},
    )
    good = (
        api(team, "sbom:write")
        .post(
            "/api/v1/sboms?projectName=good&autoCreate=true",
            data=KEYCLOAK,
            content_type="application/json",
        )
        .json()["id"]
    )
    assert wait_for(lambda: finished(str(bad.pk))) == JobStatus.FAILED
    assert wait_for(lambda: finished(good)) == JobStatus.DONE
    bad.refresh_from_db()
    assert "not a CycloneDX BOM" in bad.error
    assert Sbom.objects.count() == 1


def test_high_priority_uploads_use_their_own_queue(team, api, start_worker, settings):
    start_worker(queues=[settings.INGEST_HIGH_QUEUE])
    client = api(team, "sbom:write")
    url = "/api/v1/sboms?projectName=p&autoCreate=true&projectVersion="
    normal = client.post(url + "1", data=KEYCLOAK, content_type="application/json").json()["id"]
    urgent = client.post(
        url + "2", data=KEYCLOAK, content_type="application/json", HTTP_X_PRIORITY="1"
    ).json()["id"]
    assert wait_for(lambda: finished(urgent)) == JobStatus.DONE
    time.sleep(1.0)
    # The worker only drains the high-priority queue: the normal upload is still waiting.
    assert job_status(normal) == JobStatus.QUEUED


def test_worker_killed_mid_job_loses_nothing(team, api, start_worker):
    """kill -9 the worker while it loads a large SBOM; the sweep re-runs the job from its
    stored payload and the result is as if it ran once."""
    first = start_worker(TRUSTRANK_JOB_LEASE_SECONDS="2")
    big = make_bom(150_000)
    client = api(team, "sbom:write")
    job_id = client.post(
        "/api/v1/sboms?projectName=big&projectVersion=1&autoCreate=true",
        data=big,
        content_type="application/json",
    ).json()["id"]
    wait_for(lambda: job_status(job_id) == JobStatus.RUNNING, timeout=60, interval=0.02)
    time.sleep(0.3)  # well into the parse/load, which takes seconds for 150,000 components
    first.kill()
    assert job_status(job_id) == JobStatus.RUNNING
    assert not Sbom.objects.exists() and not Component.objects.exists()

    # A fresh worker with the periodic sweep (every second) picks the job up again.
    start_worker(beat=True, TRUSTRANK_SWEEP_SECONDS="1")
    assert wait_for(lambda: finished(job_id), timeout=120) == JobStatus.DONE
    job = IngestJob.objects.get(pk=job_id)
    assert job.attempts == 2
    assert Sbom.objects.count() == 1
    assert Component.objects.count() == 150_000


def test_job_whose_message_was_lost_is_found_by_the_sweep(team, start_worker):
    """The job row, not the broker, is the source of truth."""
    job = IngestJob.objects.create(
        team=team,
        kind="sbom",
        digest="0" * 64,
        params={"projectName": "lost", "autoCreate": True},
        enqueued_at=timezone.now() - timedelta(minutes=10),
    )
    IngestPayload.objects.create(job=job, data=KEYCLOAK)  # stored, but never enqueued
    start_worker(beat=True, TRUSTRANK_SWEEP_SECONDS="1", TRUSTRANK_JOB_REQUEUE_SECONDS="5")
    assert wait_for(lambda: finished(str(job.pk)), timeout=60) == JobStatus.DONE
    assert Sbom.objects.get().component_count == 903
