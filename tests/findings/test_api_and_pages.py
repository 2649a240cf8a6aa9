"""One findings list for every kind: the API, the page, a finding's page and its triage."""

from __future__ import annotations

import pytest

from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.reconcile import FindingSpec, findings_reconcile

pytestmark = pytest.mark.django_db


def make(team, kind: str, category: str, name: str, severity: str = "high") -> Finding:
    findings_reconcile(
        team_id=team.pk,
        kind=kind,
        specs=[
            FindingSpec(
                fingerprint=f"{kind}-{name}",
                title=f"{category}: {name}",
                severity=severity,
                category=category,
                source="traces" if kind == "reliability" else "certificate",
                values={"environment": "prod", "evidence": {"name": name}},
            )
        ],
        existing=[],
        actor=Actor.system("test"),
        resolve_missing=False,
    )
    return Finding.objects.get(team=team, fingerprint=f"{kind}-{name}")


@pytest.fixture
def mixed(team, other_team):
    from tests.vulns.helpers import bom, import_osv, load_sbom, osv

    import_osv(team, [osv("GHSA-aaaa-bbbb-cccc", "npm", "lodash",
                          [{"introduced": "0"}, {"fixed": "4.17.19"}], aliases=["CVE-2020-8203"],
                          range_type="SEMVER")])
    load_sbom(team, bom([("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")]))
    make(team, "identity", "expired", "cert-a", severity="critical")
    make(team, "reliability", "broken_context", "gateway-payments", severity="medium")
    make(other_team, "identity", "expired", "secret-of-other-team")


def test_api_lists_every_kind_and_filters_by_kind(api, team, mixed):
    client = api(team, "read")
    body = client.get("/api/v1/findings").json()
    kinds = {f["kind"] for f in body["results"]}
    assert kinds == {"vulnerability", "identity", "reliability"}
    assert all("secret-of-other-team" not in f["title"] for f in body["results"])
    only = client.get("/api/v1/findings?kind=identity").json()["results"]
    assert [f["category"] for f in only] == ["expired"] and only[0]["environment"] == "prod"
    assert only[0]["project"] is None and only[0]["component"] is None
    two = client.get("/api/v1/findings?kind=identity&kind=reliability").json()["results"]
    assert {f["kind"] for f in two} == {"identity", "reliability"}


def test_detail_and_triage_of_a_non_vulnerability_finding(api, team, mixed):
    f = Finding.objects.get(team=team, kind="reliability")
    client = api(team, "read", "triage")
    detail = client.get(f"/api/v1/findings/{f.pk}").json()
    assert detail["evidence"] == {"name": "gateway-payments"}
    assert [e["action"] for e in detail["audit"]] == ["created"]
    r = client.post(f"/api/v1/findings/{f.pk}/triage",
                    {"state": "exploitable", "reason": "seen in prod"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "exploitable"
    audit = client.get(f"/api/v1/findings/{f.pk}").json()["audit"]
    assert audit[-1]["action"] == "state_changed" and audit[-1]["actor_kind"] == "api_key"


def test_other_team_cannot_read_or_triage(api, team, other_team, mixed):
    f = Finding.objects.get(team=team, kind="identity")
    intruder = api(other_team, "read", "triage")
    assert intruder.get(f"/api/v1/findings/{f.pk}").status_code == 404
    r = intruder.post(f"/api/v1/findings/{f.pk}/triage",
                      {"state": "false_positive", "reason": "x"}, format="json")
    assert r.status_code == 404
    f.refresh_from_db()
    assert f.state == "in_triage"


def test_identity_findings_api_keeps_its_shape(api, team, mixed):
    rows = api(team, "read").get("/api/v1/identity-findings").json()["results"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["kind"], row["status"], row["environment"]) == ("expired", "open", "prod")
    assert {"first_seen_at", "last_seen_at", "resolved_at", "evidence", "spiffe_id"} <= set(row)
    resolved = api(team, "read").get("/api/v1/identity-findings?status=resolved").json()
    assert resolved["results"] == []


def test_findings_page_shows_every_kind_with_a_kind_filter(client, make_user, team, mixed):
    make_user("ann", team=team)
    client.login(username="ann", password="pw-ann")
    html = client.get("/findings/").content.decode()
    assert "Expired certificate" in html and "lodash" in html
    assert "secret-of-other-team" not in html
    only = client.get("/findings/?kind=reliability").content.decode()
    assert "gateway-payments" in only and "lodash" not in only
    assert 'name="kind"' in html
    f = Finding.objects.get(team=team, kind="identity")
    page = client.get(f"/findings/{f.pk}/").content.decode()
    assert "cert-a" in page and "Expired certificate" in page
