"""VEX end to end: a real gunicorn and a real Celery worker on the test database. An SBOM is
uploaded and matched into findings by the worker; VEX documents arrive over HTTP (applied in
the request, or by the worker for Dependency-Track's PUT and for big documents); the audit
trail names the key; an OpenVEX export of the result is valid. A worker killed in the middle
of a document loses nothing and applies nothing twice."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from tests.conftest import WebServer, wait_for
from tests.vex.helpers import ANNOTATIONS, DATA, findings_of, scanned_bom
from trustrank.accounts.models import ApiKey
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.inventory.models import ProjectVersion
from trustrank.jobs.models import FINISHED, JobStatus
from trustrank.parsers.openvex import openvex_validate

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Documents of more statements than this go to the worker (202).
SYNC_MAX = "3"


def _openvex(*statements: dict[str, Any]) -> bytes:
    return orjson.dumps({
        "@context": "https://openvex.dev/ns/v0.2.0", "@id": "https://example.com/vex/e2e",
        "author": "Example Security", "timestamp": "2026-01-01T00:00:00Z", "version": 1,
        "statements": list(statements),
    })


def _session(secret: str) -> requests.Session:
    session = requests.Session()
    session.headers["X-Api-Key"] = secret
    return session


@pytest.fixture
def server(tmp_path: Path) -> Any:
    server = WebServer(log_path=tmp_path / "gunicorn.log",
                       extra_env={"TRUSTRANK_VEX_SYNC_MAX_STATEMENTS": SYNC_MAX})
    yield server
    server.stop()


def _uploaded_project(url: str, secret: str, team: Any) -> ProjectVersion:
    response = _session(secret).post(
        f"{url}/api/v1/sboms?projectName=example-app&projectVersion=1.0.0&autoCreate=true",
        data=scanned_bom(), headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 202, response.text
    wait_for(lambda: Finding.objects.filter(team=team).count() == 4, timeout=90)
    return ProjectVersion.objects.get(project__team=team, version="1.0.0")


def test_vex_over_http_through_the_worker_and_back_out(team, other_team, make_key, server,
                                                       celery_worker):
    pv = _uploaded_project(server.url, make_key(team, "sbom:write"), team)
    theirs_secret = make_key(other_team, "sbom:write")
    _uploaded_project(server.url, theirs_secret, other_team)
    analyst = _session(make_key(team, "triage", "read"))
    key = ApiKey.objects.filter(team=team).latest("pk")
    base = f"{server.url}/api/v1/vex?projectName=example-app&projectVersion=1.0.0"

    # 1. POST a CycloneDX VEX: applied within the request.
    response = analyst.post(base, data=(DATA / "cdx-1.4_vex_example.json").read_bytes(),
                            headers={"Content-Type": "application/vnd.cyclonedx+json"})
    assert response.status_code == 200, response.text
    assert (response.json()["applied"], response.json()["unmatched"]) == (1, 0)
    f = findings_of(pv)["CVE-2020-25649", "jackson-databind"]
    assert (f.state, f.justification) == ("not_affected", "code_not_reachable")

    # 2. Dependency-Track's PUT: a token at once, the worker applies it.
    doc = _openvex({"vulnerability": {"name": "CVE-2014-123456"}, "status": "fixed",
                    "products": [{"@id": ANNOTATIONS}]})
    response = analyst.put(f"{server.url}/api/v1/vex", json={
        "projectName": "example-app", "projectVersion": "1.0.0",
        "vex": base64.b64encode(doc).decode(),
    })
    assert response.status_code == 200, response.text
    token = response.json()["token"]
    wait_for(lambda: analyst.get(f"{server.url}/api/v1/event/token/{token}").json()
             == {"processing": False}, timeout=60, interval=0.2)
    job = analyst.get(f"{server.url}/api/v1/jobs/{token}").json()
    assert job["status"] == "done" and job["counts"]["applied"] == 1
    fixed = findings_of(pv)["CVE-2014-123456", "jackson-annotations"]
    assert fixed.state == "resolved"
    (event,) = AuditEvent.objects.filter(finding=fixed, action="state_changed")
    assert event.actor_kind == "api_key" and event.actor_key_id == key.pk

    # 3. A document past the request's limit: 202 and the job's status URL.
    big = _openvex(*[
        {"vulnerability": {"name": v}, "status": "under_investigation"}
        for v in ("CVE-2020-25650", "CVE-2020-25651", "CVE-2099-0001", "CVE-2099-0002")
    ], {"vulnerability": {"name": "CVE-2020-25650"}, "status": "affected",
        "action_statement": "Upgrade to 2.10.5.1."})
    response = analyst.post(base, data=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 202, response.text
    status_url = response.json()["status_url"]
    wait_for(lambda: analyst.get(f"{server.url}{status_url}").json()["status"] in FINISHED,
             timeout=60, interval=0.2)
    job = analyst.get(f"{server.url}{status_url}").json()
    assert job["status"] == "done", job
    assert (job["counts"]["applied"], job["counts"]["unchanged"], job["counts"]["unmatched"]) == (
        1, 1, 2)
    assert [s["vulnerability"] for s in job["result"]["unmatched_statements"]] == [
        "CVE-2099-0001", "CVE-2099-0002"]
    assert findings_of(pv)["CVE-2020-25650", "jackson-databind"].state == "exploitable"

    # The other team's findings never moved.
    assert set(Finding.objects.filter(team=other_team).values_list("state", flat=True)) == {
        "in_triage"}

    # 4. Out again as OpenVEX, valid against the official schema.
    response = analyst.get(f"{server.url}/api/v1/exports",
                           params={"format": "openvex", "project_version": pv.pk})
    assert response.status_code == 200, response.text[:500]
    exported = response.json()
    openvex_validate(exported)
    statuses = {s["vulnerability"]["name"]: s["status"] for s in exported["statements"]}
    assert statuses == {"CVE-2020-25649": "not_affected", "CVE-2014-123456": "fixed",
                        "CVE-2020-25650": "affected", "CVE-2020-25651": "under_investigation"}


def test_a_worker_killed_mid_document_loses_nothing_and_applies_once(team, make_key, start_worker,
                                                                     server):
    env = {"TRUSTRANK_JOB_LEASE_SECONDS": "3", "TRUSTRANK_JOB_HEARTBEAT_SECONDS": "0.5",
           "TRUSTRANK_RANKING_DEBOUNCE_SECONDS": "600"}
    loader = start_worker(**env)
    pv = _uploaded_project(server.url, make_key(team, "sbom:write"), team)
    loader.stop()
    first = start_worker(TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS="1.0", **env)
    analyst = _session(make_key(team, "triage", "read"))
    doc = (DATA / "cdx-1.4_vex_dependency-track-issue2549.json").read_bytes()
    response = analyst.put(f"{server.url}/api/v1/vex", json={
        "project": str(pv.uuid), "vex": base64.b64encode(doc).decode()})
    assert response.status_code == 200, response.text
    token = response.json()["token"]
    from ingest.models import IngestJob

    def mid_job() -> Any:
        row = IngestJob.objects.get(pk=token)
        assert row.status not in FINISHED, (row.status, row.error)
        return row.status == JobStatus.RUNNING and row.phase in (
            "applying statements", "applied")

    wait_for(mid_job, timeout=30, interval=0.05)
    first.kill()
    # Nothing of the dead attempt is visible: the document is one transaction.
    assert set(Finding.objects.filter(project_version=pv).values_list("state", flat=True)) == {
        "in_triage"}
    assert not AuditEvent.objects.filter(subject_type="vex").exists()

    start_worker(beat=True, TRUSTRANK_SWEEP_SECONDS="1", **env)
    wait_for(lambda: IngestJob.objects.get(pk=token).status in FINISHED, timeout=40,
             interval=0.2)
    row = IngestJob.objects.get(pk=token)
    assert row.status == JobStatus.DONE and row.attempts == 2, row.error
    assert row.counts["applied"] == 3
    f = findings_of(pv)
    assert f["CVE-2020-25650", "jackson-databind"].state == "false_positive"
    # Once: one event per changed finding, one summary.
    assert AuditEvent.objects.filter(subject_type="vex", action="state_changed").count() == 3
    assert AuditEvent.objects.filter(action="vex_imported").count() == 1
