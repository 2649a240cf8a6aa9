"""End to end: HTTP -> PostgreSQL -> a real Celery worker -> API and page."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from tests.identity.pki import data, issue, make_pki

pytestmark = pytest.mark.e2e


def finished(job_id: str) -> IngestJob | None:
    job = IngestJob.objects.get(pk=job_id)
    return job if job.is_finished else None


def wait_job(job_id: str) -> IngestJob:
    wait_for(lambda: finished(job_id), timeout=60)
    return IngestJob.objects.get(pk=job_id)


def test_bundle_and_certificates_through_a_real_worker(
    celery_worker, team, other_team, api, make_user
) -> None:
    client: APIClient = api(team, "certs:write", "read")
    pki = make_pki("mesh.example")
    resp = client.put("/api/v1/environments/prod/trust-bundle", data=pki.root.pem,
                      content_type="application/x-pem-file")
    assert resp.status_code == 202
    bundle_job = wait_job(resp.json()["id"])
    assert bundle_job.status == JobStatus.DONE, bundle_job.error

    good = pki.leaf("/ns/pay/sa/payments")
    forged = issue("forged", uris=("spiffe://mesh.example/ns/pay/sa/payments",))
    uploads = [
        good.pem + pki.intermediate.pem,
        forged.pem,
        data("spire_certs_blog_cert.pem"),
    ]
    job_ids = []
    for body in uploads:
        resp = client.post("/api/v1/certificates?environment=prod&observed=e2e", data=body,
                           content_type="application/x-pem-file")
        assert resp.status_code == 202, resp.content
        job_ids.append(resp.json()["id"])
    for job_id in job_ids:
        job = wait_job(job_id)
        assert job.status == JobStatus.DONE, job.error

    identities = {
        i["spiffe_id"]: i
        for i in client.get("/api/v1/identities?environment=prod").json()["results"]
    }
    assert identities["spiffe://mesh.example/ns/pay/sa/payments"]["strength"] == 100
    assert identities["spiffe://mesh.example/ns/pay/sa/payments"]["service"]["name"] == "payments"
    assert identities["spiffe://example.org/blog"]["strength"] == 0  # self-signed: not valid
    certs = client.get("/api/v1/certificates?environment=prod&role=leaf").json()["results"]
    assert sorted(c["strength"] for c in certs) == [30, 30, 100]

    browser = Client()
    browser.force_login(make_user("alice", team=team))
    html = browser.get("/identities/?environment=prod").content.decode()
    assert "spiffe://mesh.example/ns/pay/sa/payments" in html
    assert 'class="num strength">100<' in html

    outsider = Client()
    outsider.force_login(make_user("mallory", team=other_team))
    assert "mesh.example" not in outsider.get("/identities/?environment=prod").content.decode()
    assert api(other_team, "read").get("/api/v1/identities").json()["count"] == 0


def test_bad_upload_never_reaches_the_worker(celery_worker, team, api) -> None:
    leaf = make_pki().leaf("/x")
    resp = api(team, "certs:write").post(
        "/api/v1/certificates", data=leaf.pem + leaf.key_pem, content_type="application/x-pem-file"
    )
    assert resp.status_code == 400
    assert not IngestJob.objects.exists()
