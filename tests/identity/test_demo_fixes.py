"""Found by trying the demo: an expired trust anchor becomes a finding; an identity says why
its strength differs from its certificate's; a bundle naming no trust domain is called out."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import issue, make_pki, now
from trustrank.findings.models import Finding
from trustrank.identity.models import Identity
from trustrank.identity.services.certificates import identity_environments_reevaluate

pytestmark = pytest.mark.django_db

PEM = "application/x-pem-file"


def put_bundle(client: Any, body: bytes, env: str = "prod", query: str = "") -> Any:
    return client.put(
        f"/api/v1/environments/{env}/trust-bundle{'?' + query if query else ''}",
        data=body, content_type=PEM,
    )


def post_certs(client: Any, body: bytes, env: str = "prod") -> Any:
    return client.post(f"/api/v1/certificates?environment={env}", data=body, content_type=PEM)


def _page(client, make_user, team, url: str) -> str:
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


# --- An expired trust anchor -----------------------------------------------------------------


def _expired_root():
    return issue("Old root CA", ca=True, path_length=1, uris=("spiffe://prod.example",),
                 not_before=now() - dt.timedelta(days=800), not_after=now() - dt.timedelta(days=2))


def test_an_expired_anchor_becomes_a_finding_and_a_new_bundle_resolves_it(team, api):
    client = api(team, "certs:write", "read")
    assert put_bundle(client, _expired_root().pem).status_code == 202
    run_queued_jobs()
    finding = Finding.objects.get(team=team, category="anchor_expired")
    assert finding.kind == "identity" and finding.environment == "prod"
    assert finding.severity == "high" and finding.state == "in_triage"
    assert "Old root CA" in finding.title and "expired on" in finding.title
    listed = client.get("/api/v1/identity-findings?kind=anchor_expired").json()
    assert [f["id"] for f in listed["results"]] == [finding.pk]
    bundle = client.get("/api/v1/environments/prod/trust-bundle").json()
    assert [a["expired"] for a in bundle["anchors"]] == [True]

    assert put_bundle(client, make_pki().root.pem).status_code == 202
    run_queued_jobs()
    finding.refresh_from_db()
    assert finding.auto_resolved and finding.resolved_at is not None


def test_the_periodic_reevaluation_finds_an_anchor_that_expired_since(team, api):
    client = api(team, "certs:write")
    root = issue("Short root CA", ca=True, path_length=1, uris=("spiffe://prod.example",),
                 days=100)
    put_bundle(client, root.pem)
    run_queued_jobs()
    # No certificates in the environment yet: its bundle is re-evaluated all the same.
    assert not Finding.objects.filter(team=team, category__startswith="anchor_").exists()
    identity_environments_reevaluate(now=now() + dt.timedelta(days=80))
    assert Finding.objects.get(team=team, category="anchor_expiring").severity == "medium"
    identity_environments_reevaluate(now=now() + dt.timedelta(days=120))
    assert Finding.objects.filter(
        team=team, category="anchor_expired", resolved_at__isnull=True
    ).exists()


def test_the_identities_page_flags_the_expired_anchor(team, api, client, make_user):
    put_bundle(api(team, "certs:write"), _expired_root().pem)
    run_queued_jobs()
    html = _page(client, make_user, team, "/identities/?environment=prod")
    assert 'class="badge bad anchor-expired"' in html
    assert "Trust anchor" in html and "Old root CA" in html


def test_another_teams_expired_anchor_stays_theirs(team, other_team, api):
    put_bundle(api(other_team, "certs:write"), _expired_root().pem)
    run_queued_jobs()
    assert Finding.objects.filter(team=other_team, category="anchor_expired").exists()
    mine = api(team, "read").get("/api/v1/identity-findings?kind=anchor_expired").json()
    assert mine["count"] == 0


# --- Why an identity's strength differs from its certificate's -------------------------------


def test_an_identity_says_why_it_is_0_while_its_certificate_is_30(team, api, client, make_user):
    api_client = api(team, "certs:write", "read")
    pki = make_pki()
    put_bundle(api_client, pki.root.pem)
    # Self-signed, claiming an ID in the bundle's trust domain: not vouched for by the bundle.
    forged = issue("payments", uris=("spiffe://prod.example/ns/pay/sa/payments",))
    post_certs(api_client, forged.pem)
    run_queued_jobs()
    identity = Identity.objects.get(team=team, spiffe_id="spiffe://prod.example/ns/pay/sa/payments")
    cert = api_client.get("/api/v1/certificates?environment=prod").json()["results"][0]
    assert cert["strength"] == 30 and identity.strength == 0
    body = api_client.get(f"/api/v1/identities/{identity.pk}").json()
    reason = body["strength_reason"]
    assert reason.startswith("0: none of its 1 certificate chains to the environment's trust")
    assert "self-signed" in reason and "certificate strength 30" in reason
    assert "never lends it to the identity" in reason
    listed = api_client.get("/api/v1/identities").json()["results"]
    assert listed[0]["strength_reason"] == reason
    html = _page(client, make_user, team, f"/identities/{identity.pk}/")
    assert re.search(r'class="strength-reason">0: none of its 1 certificate', html)


def test_a_valid_identity_names_the_certificate_it_takes_its_strength_from(team, api):
    client = api(team, "certs:write", "read")
    pki = make_pki()
    put_bundle(client, pki.root.pem)
    post_certs(client, pki.leaf("/ns/pay/sa/payments").pem + pki.intermediate.pem)
    run_queued_jobs()
    body = client.get("/api/v1/identities").json()["results"][0]
    assert body["strength"] == 100
    assert body["strength_reason"].startswith("100: from its best certificate valid now")


def test_without_a_bundle_the_reason_says_so(team, api):
    client = api(team, "certs:write", "read")
    post_certs(client, make_pki().leaf("/ns/pay/sa/payments").pem)
    run_queued_jobs()
    body = client.get("/api/v1/identities").json()["results"][0]
    assert body["strength"] == 0
    assert body["strength_reason"].startswith("0: the environment has no trust bundle")


# --- A PEM bundle that names no trust domain -------------------------------------------------


def _root_without_spiffe_san():
    return issue("Plain root CA", ca=True, path_length=1, days=3650)


def test_a_bundle_without_trust_domain_is_accepted_with_a_warning(team, api):
    client = api(team, "certs:write", "read")
    response = put_bundle(client, _root_without_spiffe_san().pem)
    assert response.status_code == 202
    body = response.json()
    assert body["trust_domains"] == []
    [warning] = body["warnings"]
    assert "names no trust domain" in warning and "foreign trust domain" in warning
    assert "strength 30 instead of 100" in warning and "trust_domain=" in warning
    run_queued_jobs()
    assert client.get("/api/v1/environments/prod/trust-bundle").json()["warnings"] == [warning]


def test_a_bundle_with_trust_domain_carries_no_warning(team, api):
    client = api(team, "certs:write", "read")
    response = put_bundle(client, _root_without_spiffe_san().pem, query="trust_domain=prod.example")
    assert response.json()["warnings"] == []
    assert response.json()["trust_domains"] == ["prod.example"]
    run_queued_jobs()
    assert client.get("/api/v1/environments/prod/trust-bundle").json()["warnings"] == []


def test_identities_under_such_a_bundle_say_why_they_count_as_foreign(
    team, api, client, make_user
):
    api_client = api(team, "certs:write", "read")
    root = _root_without_spiffe_san()
    leaf = issue("payments", issuer=root, uris=("spiffe://prod.example/ns/pay/sa/payments",))
    put_bundle(api_client, root.pem)
    post_certs(api_client, leaf.pem)
    run_queued_jobs()
    body = api_client.get("/api/v1/identities").json()["results"][0]
    assert body["strength"] == 30 and body["trust_domain_known"] is False
    assert "names no trust domain" in body["strength_reason"]
    html = _page(client, make_user, team, "/identities/?environment=prod")
    assert 'class="warning bundle-warning"' in html and "names no trust domain" in html


def test_the_upload_page_warns_about_a_bundle_without_trust_domain(team, make_user, client):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    upload = SimpleUploadedFile("ca.pem", _root_without_spiffe_san().pem, content_type=PEM)
    response = client.post(
        "/identities/upload/",
        {"kind": "bundle", "bundle-file": upload, "bundle-environment": "prod",
         "bundle-trust_domain": "", "bundle-team": ""},
        follow=True,
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Trust bundle queued as job" in html
    assert 'class="warning">This bundle names no trust domain' in html
