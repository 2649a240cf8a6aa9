"""POST /api/v1/feeds/nvd end to end: gunicorn, PostgreSQL and a real Celery worker. A Go
advisory without CVSS gives a finding of unknown severity; the NVD page (real records) sent
over HTTP gives it NVD's score, read back through the finding API."""

from __future__ import annotations

import gzip

import pytest
import requests

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from trustrank.findings.models import Finding

from .helpers import bom, import_osv, load_sbom
from .test_nvd import CVE, PAGE_FILE, VECTOR, XNET, _go_advisory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_nvd_page_over_http_gives_findings_nvds_severity(
    web_server, celery_worker, team, make_key
):
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    finding = Finding.objects.get(team=team, cve_id=CVE)
    assert finding.severity == "unknown"
    url = web_server.url
    for scopes in (("admin",), ("read", "sbom:write")):
        r = requests.post(f"{url}/api/v1/feeds/nvd", data=PAGE_FILE.read_bytes(), timeout=30,
                          headers={"X-Api-Key": make_key(team, *scopes)})
        assert r.status_code == 403, (scopes, r.text)
    operator = requests.Session()
    operator.headers["X-Api-Key"] = make_key(team, "feeds:write", "read")
    r = operator.post(f"{url}/api/v1/feeds/nvd", data=gzip.compress(PAGE_FILE.read_bytes()),
                      headers={"Content-Type": "application/gzip",
                               "X-Filename": "nvd-cves-page.json.gz"}, timeout=30)
    assert r.status_code == 202, r.text
    status_url = r.json()["status_url"]

    def finished():
        job = operator.get(f"{url}{status_url}" if status_url.startswith("/") else status_url,
                           timeout=30).json()
        return job if job["status"] in (JobStatus.DONE, JobStatus.FAILED) else None

    job = wait_for(finished, timeout=120)
    assert job["status"] == JobStatus.DONE, job
    assert IngestJob.objects.get(pk=r.json()["id"]).kind == "nvd"
    data = operator.get(f"{url}/api/v1/findings/{finding.pk}", timeout=30).json()
    assert (data["severity"], data["cvss_score"], data["cvss_vector"], data["severity_source"]) \
        == ("high", 7.5, VECTOR, "nvd")
    # A bad page is refused at once, naming what is wrong; no job.
    r = operator.post(f"{url}/api/v1/feeds/nvd", data=b'{"format": "NVD_CVE"}', timeout=30)
    assert r.status_code == 400 and "not an NVD CVE API 2.0 page" in r.json()["detail"]
    assert IngestJob.objects.filter(kind="nvd").count() == 1
