"""REST API: certificate and trust bundle receivers, certificate and identity lists."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from ingest.models import IngestJob, IngestPayload, JobStatus
from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import data, issue, make_pki, rsa_key

pytestmark = pytest.mark.django_db

PEM = "application/x-pem-file"


def post_certs(client: Any, body: bytes, query: str = "environment=prod", **kw: Any) -> Any:
    return client.post(f"/api/v1/certificates?{query}", data=body, content_type=PEM, **kw)


def put_bundle(client: Any, body: bytes, env: str = "prod", query: str = "") -> Any:
    ctype = "application/json" if body.lstrip()[:1] == b"{" else PEM
    return client.put(
        f"/api/v1/environments/{env}/trust-bundle{'?' + query if query else ''}",
        data=body, content_type=ctype,
    )


def test_upload_answers_202_with_job_and_status_url(team, api) -> None:
    client = api(team, "certs:write", "read")
    leaf = make_pki().leaf("/ns/pay/sa/payments")
    resp = post_certs(client, leaf.pem, "environment=prod&service=payments&observed=istio-proxy")
    assert resp.status_code == 202, resp.content
    body = resp.json()
    assert body["status_url"] == f"/api/v1/jobs/{body['id']}"
    assert resp["Location"] == body["status_url"]
    job = IngestJob.objects.get(pk=body["id"])
    assert job.kind == "certificates" and job.team == team
    assert job.params["environment"] == "prod" and job.params["service"] == "payments"


def test_upload_without_key_is_refused(db) -> None:
    from rest_framework.test import APIClient

    assert post_certs(APIClient(), b"x").status_code == 401


def test_upload_with_read_only_key_is_forbidden(team, api) -> None:
    resp = post_certs(api(team, "read"), make_pki().leaf("/a").pem)
    assert resp.status_code == 403
    assert not IngestJob.objects.exists()


def test_listing_needs_only_read(team, api) -> None:
    assert api(team, "read").get("/api/v1/certificates").status_code == 200
    assert api(team, "certs:write").get("/api/v1/certificates").status_code == 403


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"not a certificate at all", "neither PEM"),
        (b"-----BEGIN CERTIFICATE-----\nMIIB", "truncated"),
        (data("go-spiffe_x509svid_corrupt-cert.pem"), "not a valid X.509 certificate"),
    ],
)
def test_bad_certificate_is_refused_and_nothing_is_stored(team, api, body, needle) -> None:
    resp = post_certs(api(team, "certs:write"), body)
    assert resp.status_code == 400
    assert resp["Content-Type"] == "application/problem+json"
    assert needle in resp.json()["detail"]
    assert not IngestJob.objects.exists() and not IngestPayload.objects.exists()


def test_private_key_is_refused_and_never_stored(team, api) -> None:
    pki = make_pki()
    leaf = pki.leaf("/a")
    secret = leaf.key_pem
    resp = post_certs(api(team, "certs:write"), leaf.pem + secret)
    assert resp.status_code == 400
    assert "private key" in resp.json()["detail"]
    assert not IngestJob.objects.exists()
    assert not IngestPayload.objects.exists()
    der_key = rsa_key(2048).private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    resp = api(team, "certs:write").post(
        "/api/v1/certificates", data=der_key, content_type="application/pkix-cert"
    )
    assert resp.status_code == 400 and "private key" in resp.json()["detail"]
    assert not IngestPayload.objects.exists()


def test_handler_refuses_a_private_key_too(team, make_key) -> None:
    """Defence in depth: a payload that reached the job table some other way."""
    from ingest.services import job_create
    from trustrank.accounts.principal import Principal

    leaf = make_pki().leaf("/a")
    job = job_create(
        team=team, kind="certificates", payload=leaf.pem + leaf.key_pem,
        principal=Principal(scopes_by_team={team.pk: frozenset({"certs:write"})}),
        params={"environment": "prod"},
    )
    run_queued_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "private key" in job.error
    from trustrank.identity.models import Certificate

    assert not Certificate.objects.exists()


def test_invalid_environment_is_refused(team, api) -> None:
    resp = post_certs(api(team, "certs:write"), make_pki().leaf("/a").pem, "environment=../etc")
    assert resp.status_code == 400 and "environment" in resp.json()["detail"]


def test_der_and_multipart_uploads(team, api) -> None:
    client = api(team, "certs:write", "read")
    pki = make_pki()
    der = pki.leaf("/der").der
    resp = client.post(
        "/api/v1/certificates?environment=prod", data=der, content_type="application/pkix-cert"
    )
    assert resp.status_code == 202
    from django.core.files.uploadedfile import SimpleUploadedFile

    resp = client.post(
        "/api/v1/certificates",
        {"file": SimpleUploadedFile("chain.pem", pki.leaf("/multi").pem + pki.intermediate.pem),
         "environment": "prod", "service": "multi"},
        format="multipart",
    )
    assert resp.status_code == 202, resp.content
    assert resp.json()["certificates"] == 2
    run_queued_jobs()
    spiffe = {c["spiffe_id"] for c in client.get("/api/v1/certificates").json()["results"]}
    assert {"spiffe://prod.example/der", "spiffe://prod.example/multi"} <= spiffe


def test_bundle_then_certificates_give_strengths(team, api) -> None:
    client = api(team, "certs:write", "read")
    pki = make_pki()
    assert put_bundle(client, pki.root.pem).status_code == 202
    good = pki.leaf("/ns/pay/sa/payments")
    forged = issue("forged", uris=("spiffe://prod.example/ns/pay/sa/payments",))
    plain = issue("web", issuer=pki.intermediate, dns=("web.example",))
    weak = pki.leaf("/ns/pay/sa/legacy", key=rsa_key(1024))
    for body in (good.pem + pki.intermediate.pem, forged.pem, plain.pem, weak.pem):
        assert post_certs(client, body).status_code == 202
    jobs = run_queued_jobs()
    assert all(j.status == JobStatus.DONE for j in jobs), [j.error for j in jobs]
    certs = {
        (c["spiffe_id"], c["subject"]): c
        for c in client.get("/api/v1/certificates?environment=prod&role=leaf").json()["results"]
    }
    by_subject = {subject.split(",")[0]: c for (_, subject), c in certs.items()}
    assert by_subject["CN=payments"]["strength"] == 100
    assert by_subject["CN=payments"]["chain"]["status"] == "valid"
    assert [p["role"] for p in by_subject["CN=payments"]["chain"]["path"]] == [
        "leaf", "intermediate", "anchor",
    ]
    assert by_subject["CN=forged"]["strength"] == 30
    assert by_subject["CN=forged"]["chain"]["status"] == "self_signed"
    assert by_subject["CN=forged"]["chain"]["reason"]
    assert by_subject["CN=web"]["strength"] == 70 and by_subject["CN=web"]["spiffe_id"] is None
    assert by_subject["CN=legacy"]["strength"] == 60
    assert by_subject["CN=payments"]["not_after"]
    identities = {
        i["spiffe_id"]: i for i in client.get("/api/v1/identities?environment=prod").json()["results"]
    }
    # The forged certificate claims the same SPIFFE ID: it neither lends nor takes strength.
    payments = identities["spiffe://prod.example/ns/pay/sa/payments"]
    assert payments["strength"] == 100
    assert payments["trust_domain"] == "prod.example"
    assert payments["service"] == {"name": "payments", "namespace": "pay", "source": "rule"}
    assert payments["certificate_count"] == 2


def test_forged_certificate_alone_gives_no_strength(team, api) -> None:
    client = api(team, "certs:write", "read")
    pki, evil = make_pki(), make_pki("evil.example")
    put_bundle(client, pki.root.pem)
    forged = issue("forged", issuer=evil.intermediate, uris=("spiffe://prod.example/ns/pay/sa/x",))
    post_certs(client, forged.pem + evil.intermediate.pem)
    run_queued_jobs()
    (identity,) = client.get("/api/v1/identities").json()["results"]
    assert identity["strength"] == 0 and identity["best_certificate"] is None
    findings = client.get("/api/v1/identity-findings?kind=chain_invalid").json()["results"]
    assert any("claims a SPIFFE ID" in f["title"] for f in findings)


def test_spiffe_bundle_json_and_trust_domain(team, api) -> None:
    client = api(team, "certs:write", "read")
    resp = put_bundle(client, data("go-spiffe_spiffebundle_valid_1.json"), query="trust_domain=local")
    assert resp.status_code == 202, resp.content
    run_queued_jobs()
    bundle = client.get("/api/v1/environments/prod/trust-bundle").json()
    assert bundle["format"] == "spiffe" and bundle["trust_domains"] == ["local"]
    assert len(bundle["anchors"]) == 1 and bundle["jwt_key_count"] == 1


def test_bad_bundle_is_refused(team, api) -> None:
    client = api(team, "certs:write")
    resp = put_bundle(client, data("go-spiffe_spiffebundle_no_keys.json"))
    assert resp.status_code == 400 and "keys" in resp.json()["detail"]
    assert put_bundle(client, b"{not json").status_code == 400
    assert not IngestJob.objects.exists()


def test_bundle_put_needs_certs_write(team, api) -> None:
    assert put_bundle(api(team, "read"), make_pki().root.pem).status_code == 403


def test_new_bundle_reverifies_existing_certificates(team, api) -> None:
    client = api(team, "certs:write", "read")
    pki = make_pki()
    post_certs(client, pki.leaf("/svc").pem + pki.intermediate.pem)
    run_queued_jobs()
    (cert,) = client.get("/api/v1/certificates?role=leaf").json()["results"]
    assert cert["chain"]["status"] == "untrusted" and cert["strength"] == 30
    put_bundle(client, pki.root.pem)
    run_queued_jobs()
    (cert,) = client.get("/api/v1/certificates?role=leaf").json()["results"]
    assert cert["chain"]["status"] == "valid" and cert["strength"] == 100


def test_reupload_is_idempotent(team, api) -> None:
    client = api(team, "certs:write", "read")
    leaf = make_pki().leaf("/svc")
    post_certs(client, leaf.pem)
    post_certs(client, leaf.pem)
    run_queued_jobs()
    assert client.get("/api/v1/certificates").json()["count"] == 1


def test_team_b_never_sees_team_a(team, other_team, api) -> None:
    a = api(team, "certs:write", "read")
    b = api(other_team, "read")
    pki = make_pki()
    put_bundle(a, pki.root.pem)
    post_certs(a, pki.leaf("/secret").pem + pki.intermediate.pem)
    run_queued_jobs()
    cert_id = a.get("/api/v1/certificates").json()["results"][0]["id"]
    identity_id = a.get("/api/v1/identities").json()["results"][0]["id"]
    assert b.get("/api/v1/certificates").json()["count"] == 0
    assert b.get("/api/v1/identities").json()["count"] == 0
    assert b.get("/api/v1/identity-findings").json()["count"] == 0
    assert b.get(f"/api/v1/certificates/{cert_id}").status_code == 404
    assert b.get(f"/api/v1/identities/{identity_id}").status_code == 404
    assert b.get("/api/v1/environments/prod/trust-bundle").status_code == 404
    assert a.get(f"/api/v1/certificates/{cert_id}").status_code == 200


def test_same_certificate_in_two_teams_stays_separate(team, other_team, api) -> None:
    leaf = make_pki().leaf("/shared")
    post_certs(api(team, "certs:write"), leaf.pem, "environment=prod&service=alpha")
    post_certs(api(other_team, "certs:write"), leaf.pem, "environment=prod&service=beta")
    run_queued_jobs()
    a = api(team, "read").get("/api/v1/certificates").json()["results"]
    b = api(other_team, "read").get("/api/v1/certificates").json()["results"]
    assert [c["service"] for c in a] == ["alpha"] and [c["service"] for c in b] == ["beta"]


def test_list_queries_are_bounded(team, api, django_assert_max_num_queries) -> None:
    client = api(team, "certs:write", "read")
    pki = make_pki()
    put_bundle(client, pki.root.pem)
    post_certs(client, b"".join(pki.leaf(f"/svc{i}").pem for i in range(8)) + pki.intermediate.pem)
    run_queued_jobs()
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/certificates").json()["count"] == 9
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/identities").json()["count"] == 8


def test_deep_queue_answers_503_with_retry_after(team, api, settings) -> None:
    settings.TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS = 0  # see the queue grow at once
    client = api(team, "certs:write")
    assert post_certs(client, make_pki().leaf("/a").pem).status_code == 202  # one queued job
    settings.TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT = 1
    resp = post_certs(client, make_pki().leaf("/b").pem)
    assert resp.status_code == 503
    assert int(resp["Retry-After"]) >= 1
    assert IngestJob.objects.count() == 1
