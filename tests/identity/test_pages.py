"""Identity pages: list per environment with expiry timeline, certificate and identity
pages, uploads, manual mapping, policies; team isolation; bounded queries."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from ingest import submit
from ingest.models import IngestJob
from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import make_pki, now
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.identity.models import Certificate, Identity, ServicePolicy

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(team):
    pki = make_pki()
    principal = Principal(scopes_by_team={team.pk: frozenset({"certs:write"})})
    submit.trust_bundle_submit(principal=principal, team=team, body=pki.root.pem,
                                 environment="prod")
    body = (pki.leaf("/ns/pay/sa/payments", days=365,
                     not_before=now() - dt.timedelta(days=345)).pem + pki.leaf("/ns/web/sa/web").pem
            + pki.intermediate.pem)
    submit.certificates_submit(principal=principal, team=team, body=body, environment="prod",
                                 observed="pod payments-1/istio-proxy")
    run_queued_jobs()
    return pki


def login(make_user, team, role: str = "admin") -> Client:
    client = Client()
    client.force_login(make_user(f"user-{team.name}-{role}", team=team, role=role))
    return client


def test_pages_require_login(db) -> None:
    resp = Client().get("/identities/")
    assert resp.status_code == 302 and "/login/" in resp["Location"]


def test_identities_page_shows_identities_timeline_and_findings(
    team, make_user, seeded, django_assert_max_num_queries
) -> None:
    client = login(make_user, team)
    with django_assert_max_num_queries(20):
        resp = client.get("/identities/?environment=prod")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert "spiffe://prod.example/ns/pay/sa/payments" in html
    assert "prod.example" in html
    assert 'class="num strength">100<' in html
    assert "<svg class=\"timeline\"" in html
    assert 'data-count="1"' in html  # the certificate expiring in 20 days
    assert "expires in" in html  # the expiring finding
    assert "Certificate for spiffe://prod.example/ns/pay/sa/payments" in html


def test_identities_htmx_fragment(team, make_user, seeded) -> None:
    client = login(make_user, team)
    resp = client.get("/identities/?environment=prod&q=web", HTTP_HX_REQUEST="true")
    html = resp.content.decode()
    assert "<html" not in html
    assert "spiffe://prod.example/ns/web/sa/web" in html
    assert "sa/payments" not in html


def test_certificate_page_shows_every_field_and_path(team, make_user, seeded) -> None:
    client = login(make_user, team)
    cert = Certificate.objects.get(spiffe_id="spiffe://prod.example/ns/pay/sa/payments")
    html = client.get(f"/identities/certificates/{cert.pk}/").content.decode()
    for needle in (
        cert.fingerprint_sha256, cert.serial, "ecdsa-with-SHA256", "EC 256 bits", "secp256r1",
        "digitalSignature", "clientAuth", "CA: FALSE", "Intermediate CA prod.example",
        "Root CA prod.example", "anchor", "valid", "pod payments-1/istio-proxy",
        cert.subject_key_id,
    ):
        assert needle in html, needle


def test_identity_page_manual_mapping(team, make_user, seeded) -> None:
    client = login(make_user, team)
    identity = Identity.objects.get(spiffe_id="spiffe://prod.example/ns/web/sa/web")
    resp = client.post(f"/identities/{identity.pk}/", {"service_name": "storefront",
                                                       "namespace": "web"})
    assert resp.status_code == 302
    identity.refresh_from_db()
    assert (identity.service_name, identity.mapping_source) == ("storefront", "manual")
    assert "storefront" in client.get(f"/identities/{identity.pk}/").content.decode()


def test_viewer_cannot_map(team, make_user, seeded) -> None:
    client = login(make_user, team, role="viewer")
    identity = Identity.objects.earliest("pk")
    resp = client.post(f"/identities/{identity.pk}/", {"service_name": "x"})
    assert resp.status_code == 403


def test_upload_page(team, make_user) -> None:
    client = login(make_user, team)
    assert client.get("/identities/upload/").status_code == 200
    pki = make_pki()
    resp = client.post("/identities/upload/", {
        "kind": "certificates",
        "cert-file": SimpleUploadedFile("leaf.pem", pki.leaf("/ui").pem),
        "cert-environment": "staging", "cert-service": "ui",
    })
    assert resp.status_code == 302 and "environment=staging" in resp["Location"]
    resp = client.post("/identities/upload/", {
        "kind": "bundle",
        "bundle-file": SimpleUploadedFile("root.pem", pki.root.pem),
        "bundle-environment": "staging",
    })
    assert resp.status_code == 302
    assert sorted(IngestJob.objects.values_list("kind", flat=True)) == [
        "certificates", "trust_bundle"
    ]


def test_upload_page_refuses_private_key(team, make_user) -> None:
    client = login(make_user, team)
    leaf = make_pki().leaf("/ui")
    resp = client.post("/identities/upload/", {
        "kind": "certificates",
        "cert-file": SimpleUploadedFile("oops.pem", leaf.pem + leaf.key_pem),
        "cert-environment": "prod",
    })
    assert resp.status_code == 400
    assert "private key" in resp.content.decode()
    assert not IngestJob.objects.exists()


def test_policies_page(team, make_user) -> None:
    client = login(make_user, team)
    resp = client.post("/identities/policies/", {
        "environment": "prod", "service_name": "payments",
        "allowed_callers": "spiffe://prod.example/ns/web/*\nspiffe://prod.example/ns/ops/sa/cron",
        "require_mtls": "on",
    })
    assert resp.status_code == 302
    policy = ServicePolicy.objects.get()
    assert policy.allowed_callers == [
        "spiffe://prod.example/ns/web/*", "spiffe://prod.example/ns/ops/sa/cron"
    ]
    assert policy.require_mtls
    assert "spiffe://prod.example/ns/web/*" in client.get("/identities/policies/").content.decode()
    bad = client.post("/identities/policies/", {"environment": "prod", "service_name": "x",
                                                "allowed_callers": "frontend"})
    assert bad.status_code == 400


def test_other_team_sees_nothing(team, other_team, make_user, seeded) -> None:
    client = login(make_user, other_team)
    html = client.get("/identities/?environment=prod").content.decode()
    assert "spiffe://prod.example" not in html
    cert = Certificate.objects.filter(team=team).earliest("pk")
    identity = Identity.objects.filter(team=team).earliest("pk")
    assert client.get(f"/identities/certificates/{cert.pk}/").status_code == 404
    assert client.get(f"/identities/{identity.pk}/").status_code == 404
    assert client.post(f"/identities/{identity.pk}/", {"service_name": "x"}).status_code == 404
    assert Finding.objects.filter(team=other_team).count() == 0
