"""Findings API and pages: filters, shapes, triage, feed import receiver, team isolation."""

from __future__ import annotations

import orjson
import pytest
from django.test import Client

from ingest.models import IngestJob
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent

from .helpers import CVSS_CRITICAL, CVSS_MEDIUM, bom, import_osv, load_sbom, osv, run_job

pytestmark = pytest.mark.django_db

COMPONENTS = [
    ("lodash", "4.17.15", "pkg:npm/lodash@4.17.15"),
    ("requests", "2.19.0", "pkg:pypi/requests@2.19.0"),
    ("jackson-databind", "2.9.4", "pkg:maven/com.fasterxml.jackson.core/jackson-databind@2.9.4"),
]
RECORDS = [
    osv(
        "GHSA-aaaa-bbbb-cccc",
        "npm",
        "lodash",
        [{"introduced": "0"}, {"fixed": "4.17.19"}],
        aliases=["CVE-2020-8203"],
        severity=CVSS_CRITICAL,
        range_type="SEMVER",
    ),
    osv(
        "PYSEC-2018-28",
        "PyPI",
        "requests",
        [{"introduced": "0"}, {"fixed": "2.20.0"}],
        aliases=["CVE-2018-18074"],
        severity=CVSS_MEDIUM,
    ),
    osv(
        "GHSA-4gq5-ch57-c2mg",
        "Maven",
        "com.fasterxml.jackson.core:jackson-databind",
        [{"introduced": "2.9.0"}, {"fixed": "2.9.5"}],
        aliases=["CVE-2018-7489"],
    ),
]
EPSS = (
    b"#model_version:v2025.03.14,score_date:2025-10-01T00:00:00Z\ncve,epss,percentile\n"
    b"CVE-2018-18074,0.90000,0.99000\nCVE-2020-8203,0.01000,0.50000\n"
)
KEV = {
    "catalogVersion": "2025.09.01",
    "vulnerabilities": [
        {
            "cveID": "CVE-2018-7489",
            "vendorProject": "FasterXML",
            "product": "jackson-databind",
            "vulnerabilityName": "jackson-databind RCE",
            "dateAdded": "2025-01-02",
        }
    ],
}


@pytest.fixture
def world(team, other_team):
    import_osv(team, RECORDS)
    run_job(team, "epss", EPSS)
    run_job(team, "kev", orjson.dumps(KEV))
    pv = load_sbom(team, bom(COMPONENTS), project="shop", version="2.0")
    other = load_sbom(other_team, bom(COMPONENTS), project="secret-project", version="1.0")
    return pv, other


def _ids(resp):
    return [r["vuln_id"] for r in resp.json()["results"]]


def test_list_needs_credentials(client):
    assert Client().get("/api/v1/findings").status_code == 401


def test_list_shape_order_and_count(api, team, world):
    pv, _ = world
    resp = api(team, "read").get(f"/api/v1/findings?project={pv.project_id}")
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 3
    # Sorted by baseline priority: lodash 9.8 (58.8+0.25), jackson KEV (5.5*6+15=48? unknown score)...
    prios = [r["baseline_priority"] for r in body["results"]]
    assert prios == sorted(prios, reverse=True)
    lodash = next(r for r in body["results"] if r["vuln_id"] == "CVE-2020-8203")
    assert lodash["advisory"]["id"] == "GHSA-aaaa-bbbb-cccc"
    assert lodash["advisory"]["aliases"] == ["CVE-2020-8203"]
    assert lodash["component"] == {
        "id": lodash["component"]["id"],
        "purl": "pkg:npm/lodash@4.17.15",
        "name": "lodash",
        "version": "4.17.15",
        "ecosystem": "npm",
        "package": "lodash",
    }
    assert lodash["severity"] == "critical" and lodash["cvss_score"] == 9.8
    assert lodash["kev"] == {"listed": False, "date_added": None}
    assert lodash["epss"] == {"probability": 0.01, "percentile": 0.5}
    assert lodash["state"] == "in_triage"
    assert lodash["baseline_priority"] == pytest.approx(9.8 * 6 + 0.01 * 25)
    jackson = next(r for r in body["results"] if r["vuln_id"] == "CVE-2018-7489")
    assert jackson["kev"]["listed"] is True


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("severity=critical", {"CVE-2020-8203"}),
        ("severity=medium", {"CVE-2018-18074"}),
        ("kev=true", {"CVE-2018-7489"}),
        ("kev=false", {"CVE-2020-8203", "CVE-2018-18074"}),
        ("epss_min=0.5", {"CVE-2018-18074"}),
        ("epss_max=0.1", {"CVE-2020-8203"}),
        ("q=CVE-2018-18074", {"CVE-2018-18074"}),
        ("q=cve-2018-18074", {"CVE-2018-18074"}),
        ("q=GHSA-AAAA-BBBB-CCCC", {"CVE-2020-8203"}),
        ("q=PYSEC-2018-28", {"CVE-2018-18074"}),
        ("q=lodash", {"CVE-2020-8203"}),
        ("q=com.fasterxml", {"CVE-2018-7489"}),
        ("state=in_triage", {"CVE-2020-8203", "CVE-2018-18074", "CVE-2018-7489"}),
        ("state=not_affected", set()),
    ],
)
def test_list_filters(api, team, world, query, expected):
    resp = api(team, "read").get(f"/api/v1/findings?{query}")
    assert resp.status_code == 200, resp.content
    assert set(_ids(resp)) == expected


def test_other_team_sees_nothing_of_ours(api, team, other_team, world):
    pv, _other_pv = world
    ours = Finding.objects.filter(team=team).first()
    theirs_client = api(other_team, "read", "triage")
    resp = theirs_client.get(f"/api/v1/findings?project={pv.project_id}")
    assert resp.json()["count"] == 0
    assert {
        r["project"]["name"] for r in theirs_client.get("/api/v1/findings").json()["results"]
    } == {"secret-project"}
    assert theirs_client.get(f"/api/v1/findings/{ours.pk}").status_code == 404
    resp = theirs_client.post(
        f"/api/v1/findings/{ours.pk}/triage",
        {"state": "false_positive", "reason": "x"},
        format="json",
    )
    assert resp.status_code == 404
    ours.refresh_from_db()
    assert ours.state == "in_triage"


def test_detail_has_advisory_ranges_history_and_audit(api, team, world):
    f = Finding.objects.get(team=team, vuln_id="CVE-2018-18074")
    resp = api(team, "read").get(f"/api/v1/findings/{f.pk}")
    assert resp.status_code == 200
    body = resp.json()
    (adv,) = body["advisories"]
    assert adv["id"] == "PYSEC-2018-28" and adv["details"] == "Details of PYSEC-2018-28."
    assert adv["affected"][0]["ranges"][0]["events"] == [{"introduced": "0"}, {"fixed": "2.20.0"}]
    assert body["fixed_versions"] == ["2.20.0"]
    assert body["epss"]["history"][0]["probability"] == 0.9
    assert body["audit"][0]["action"] == "created"


def test_triage_endpoint_needs_triage_scope_and_records_audit(api, team, world):
    f = Finding.objects.get(team=team, vuln_id="CVE-2020-8203")
    url = f"/api/v1/findings/{f.pk}/triage"
    payload = {
        "state": "not_affected",
        "justification": "code_not_reachable",
        "response": ["will_not_fix"],
        "detail": "unused",
        "reason": "reviewed",
    }
    assert api(team, "read").post(url, payload, format="json").status_code == 403
    bad = api(team, "triage").post(url, {"state": "not_affected", "reason": "x"}, format="json")
    assert bad.status_code == 400 and "justification" in bad.json()["detail"]
    resp = api(team, "triage").post(url, payload, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "not_affected"
    event = AuditEvent.objects.get(finding_id=f.pk, action="state_changed")
    assert event.actor_label.startswith("api-key:") and event.reason == "reviewed"
    comment = api(team, "triage").post(
        f"/api/v1/findings/{f.pk}/comments", {"body": "see PR 12"}, format="json"
    )
    assert comment.status_code == 201


def test_feed_import_api_needs_the_site_wide_feeds_scope(api, team):
    body = orjson.dumps(RECORDS)
    for scopes in (("sbom:write",), ("admin", "read", "triage")):
        assert (
            api(team, *scopes)
            .post("/api/v1/feeds/osv", body, content_type="application/json")
            .status_code
            == 403
        )
    resp = api(team, "feeds:write").post("/api/v1/feeds/osv", body, content_type="application/json")
    assert resp.status_code == 202
    job = IngestJob.objects.get(pk=resp.json()["id"])
    assert job.kind == "osv" and job.team_id == team.pk
    assert (
        api(team, "feeds:write")
        .post("/api/v1/feeds/ghsa", body, content_type="application/json")
        .status_code
        == 404
    )
    assert (
        api(team, "feeds:write")
        .post("/api/v1/feeds/kev", b"", content_type="application/json")
        .status_code
        == 400
    )


def _login(client, make_user, team, role="admin"):
    make_user("alice", team=team, role=role)
    assert client.login(username="alice", password="pw-alice")
    return client


def test_findings_page_lists_only_own_team_and_filters(
    client, make_user, team, world, django_assert_max_num_queries
):
    _login(client, make_user, team)
    # The contextual order reads the ranked part, then (none ranked here) the unranked one.
    # The page's ranks are counted for its rows at once: one statement (docs/ranking.md).
    with django_assert_max_num_queries(14):
        resp = client.get("/findings/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "CVE-2020-8203" in html and "shop" in html and "secret-project" not in html
    html = client.get("/findings/?kev=true").content.decode()
    assert "CVE-2018-7489" in html and "CVE-2020-8203" not in html
    frag = client.get("/findings/?q=lodash", HTTP_HX_REQUEST="true").content.decode()
    assert "<table" in frag and "<html" not in frag and "CVE-2020-8203" in frag


def test_findings_page_keyset_pagination(client, make_user, team):
    import_osv(
        team,
        [
            osv(f"GHSA-0000-0000-{i:04d}", "npm", f"pkg{i}", [{"introduced": "0"}])
            for i in range(60)
        ],
    )
    load_sbom(team, bom([(f"pkg{i}", "1.0.0", f"pkg:npm/pkg{i}@1.0.0") for i in range(60)]))
    _login(client, make_user, team)
    first = client.get("/findings/")
    assert len(first.context["findings"]) == 50 and first.context["count"] == 60
    second = client.get("/findings/?" + first.context["next_query"])
    ids = {f.pk for f in first.context["findings"]} | {f.pk for f in second.context["findings"]}
    assert len(second.context["findings"]) == 10 and len(ids) == 60
    assert not second.context["next_query"]


def test_finding_page_shows_evidence_and_triage_form_works(
    client, make_user, team, other_team, world, django_assert_max_num_queries
):
    _login(client, make_user, team, role="triager")
    f = Finding.objects.get(team=team, vuln_id="CVE-2018-7489")
    with django_assert_max_num_queries(15):
        resp = client.get(f"/findings/{f.pk}/")
    html = resp.content.decode()
    assert resp.status_code == 200
    for text in (
        "GHSA-4gq5-ch57-c2mg",
        "Details of GHSA-4gq5-ch57-c2mg.",
        "introduced 2.9.0",
        "fixed 2.9.5",
        "2.9.4",
        "jackson-databind RCE",
        "Audit trail",
        "created",
    ):
        assert text in html, text
    resp = client.post(
        f"/findings/{f.pk}/triage", {"state": "exploitable", "reason": "reachable from the API"}
    )
    assert resp.status_code == 302
    f.refresh_from_db()
    assert f.state == "exploitable"
    assert "reachable from the API" in client.get(f"/findings/{f.pk}/").content.decode()
    theirs = Finding.objects.filter(team=other_team).first()
    assert client.get(f"/findings/{theirs.pk}/").status_code == 404
    assert (
        client.post(
            f"/findings/{theirs.pk}/triage", {"state": "resolved", "reason": "x"}
        ).status_code
        == 404
    )


def test_viewer_cannot_triage_from_the_page(client, make_user, team, world):
    _login(client, make_user, team, role="viewer")
    f = Finding.objects.get(team=team, vuln_id="CVE-2018-7489")
    assert (
        client.post(f"/findings/{f.pk}/triage", {"state": "resolved", "reason": "x"}).status_code
        == 403
    )
    f.refresh_from_db()
    assert f.state == "in_triage"


def test_pages_need_login(client):
    assert client.get("/findings/").status_code == 302


def test_finding_page_shows_the_sboms_vex_evidence(client, make_user, team):
    from .helpers import ADVISORIES

    pv = load_sbom(
        team, (ADVISORIES / "vex" / "cdx-1.6_pypi_setuptools-with-vulnerability.json").read_bytes()
    )
    f = Finding.objects.get(project_version=pv)
    _login(client, make_user, team)
    html = client.get(f"/findings/{f.pk}/").content.decode()
    assert "Reported by the SBOM" in html and "requires_environment" in html
    assert "Some extra detail" in html and "Exploitable" in html
