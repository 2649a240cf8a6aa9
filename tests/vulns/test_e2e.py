"""Vulnerability pipeline end to end with a real Celery worker: SBOM upload over HTTP, feed
imports via the command (--wait) and the API, findings in the API and on the page."""

from __future__ import annotations

import io

import orjson
import pytest
from django.core.management import CommandError, call_command

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent

from .helpers import ADVISORIES, SBOMS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DROPWIZARD = (SBOMS / "cdx-1.2_maven_dropwizard-1.3.15.xml").read_bytes()


def _finished(job_id: str) -> str | None:
    status = IngestJob.objects.values_list("status", flat=True).get(pk=job_id)
    return status if status in (JobStatus.DONE, JobStatus.FAILED) else None


def test_sbom_upload_and_osv_import_give_findings_in_api_and_page(
    team, other_team, api, make_user, client, celery_worker
):
    # 1. Advisories first, through the command, waiting for the worker.
    out = io.StringIO()
    call_command(
        "import_feed",
        "osv",
        str(ADVISORIES / "osv" / "maven"),
        "--wait",
        "--timeout",
        "120",
        stdout=out,
    )
    assert "done" in out.getvalue()
    # 2. The SBOM through the receiver; matching runs on the worker after the load commits.
    uploader = api(team, "sbom:write", "read")
    resp = uploader.post(
        "/api/v1/sboms?projectName=dropwizard&projectVersion=1.3.15&autoCreate=true",
        data=DROPWIZARD,
        content_type="application/xml",
    )
    assert resp.status_code == 202, resp.content
    assert wait_for(lambda: _finished(resp.json()["id"]), timeout=60) == JobStatus.DONE
    wait_for(lambda: Finding.objects.filter(team=team).count() == 5, timeout=60)
    listing = uploader.get("/api/v1/findings?q=snakeyaml").json()
    assert listing["count"] == 1
    (f,) = listing["results"]
    assert f["vuln_id"] == "CVE-2022-1471" and f["advisory"]["id"] == "GHSA-mjmj-j48q-9wg2"
    assert f["component"]["purl"].startswith("pkg:maven/org.yaml/snakeyaml@1.23")
    # 3. KEV through the API (an operator's feeds:write key), then the finding carries it.
    admin = api(team, "feeds:write", "read")
    kev = {
        "catalogVersion": "2025.09.01",
        "vulnerabilities": [
            {
                "cveID": "CVE-2022-1471",
                "vendorProject": "SnakeYAML",
                "product": "SnakeYAML",
                "vulnerabilityName": "SnakeYAML deserialization",
                "dateAdded": "2025-09-01",
            }
        ],
    }
    resp = admin.post("/api/v1/feeds/kev", orjson.dumps(kev), content_type="application/json")
    assert resp.status_code == 202
    assert wait_for(lambda: _finished(resp.json()["id"]), timeout=60) == JobStatus.DONE
    f = admin.get(f"/api/v1/findings/{f['id']}").json()
    assert f["kev"]["listed"] is True and f["kev"]["entry"]["vulnerability_name"].startswith(
        "SnakeYAML"
    )
    # 4. The page shows it to the team, not to another team.
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    page = client.get("/findings/?kev=true")
    assert page.status_code == 200 and b"CVE-2022-1471" in page.content
    detail = client.get(f"/findings/{f['id']}/")
    assert b"SnakeYaml Constructor Deserialization" in detail.content
    make_user("mallory", team=other_team)
    client.login(username="mallory", password="pw-mallory")
    assert b"CVE-2022-1471" not in client.get("/findings/").content
    assert client.get(f"/findings/{f['id']}/").status_code == 404
    # 5. A newer SBOM without snakeyaml resolves that finding automatically.
    smaller = DROPWIZARD.replace(b"<name>snakeyaml</name>", b"<name>snakeyaml-removed</name>")
    smaller = smaller.replace(
        b"pkg:maven/org.yaml/snakeyaml@", b"pkg:maven/org.yaml/snakeyaml-removed@"
    )
    resp = uploader.post(
        "/api/v1/sboms?projectName=dropwizard&projectVersion=1.3.15",
        data=smaller,
        content_type="application/xml",
    )
    assert wait_for(lambda: _finished(resp.json()["id"]), timeout=60) == JobStatus.DONE
    wait_for(lambda: Finding.objects.get(pk=f["id"]).state == "resolved", timeout=60)
    event = AuditEvent.objects.get(finding_id=f["id"], action="auto_resolved")
    assert "no longer in the current SBOM" in event.reason


def test_import_feed_wait_exits_non_zero_when_the_job_fails(team, celery_worker, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("cve,epss,percentile\n")
    with pytest.raises(CommandError, match="failed: EPSS import refused"):
        call_command(
            "import_feed", "epss", str(bad), "--wait", "--timeout", "120", stdout=io.StringIO()
        )
