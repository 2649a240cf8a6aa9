"""Dependency-Track compatible results: project lookup, findings, metrics, violations,
team/self and the upload token, as Dependency-Track 4 answers them."""

from __future__ import annotations

import uuid

import pytest

from tests.vulns.helpers import CVSS_CRITICAL, CVSS_MEDIUM, DATA, bom, import_osv, load_sbom, osv
from trustrank.findings.models import Finding
from trustrank.inventory.models import Sbom

pytestmark = pytest.mark.django_db

COMPONENTS = [
    ("lodash", "4.17.15", "pkg:npm/lodash@4.17.15"),
    ("minimist", "0.0.8", "pkg:npm/minimist@0.0.8"),
    ("express", "4.18.2", "pkg:npm/express@4.18.2"),
    ("left-pad", "1.3.0", "pkg:npm/left-pad@1.3.0"),
]


@pytest.fixture
def shop(team):
    """A project version with three findings: critical (lodash), medium (minimist) and one
    without a severity (express)."""
    lodash = osv("GHSA-p6mc-m468-83gw", "npm", "lodash", [{"introduced": "0"},
                 {"fixed": "4.17.20"}], aliases=["CVE-2020-8203"], severity=CVSS_CRITICAL,
                 range_type="SEMVER")
    lodash["database_specific"] = {"cwe_ids": ["CWE-770", "CWE-1321"]}
    import_osv(team, [
        lodash,
        osv("GHSA-xvch-5gv4-984h", "npm", "minimist", [{"introduced": "0"}, {"fixed": "0.2.4"}],
            aliases=["CVE-2021-44906"], severity=CVSS_MEDIUM, range_type="SEMVER"),
        osv("GHSA-rv95-896h-c2vc", "npm", "express", [{"introduced": "0"}, {"fixed": "4.19.2"}],
            range_type="SEMVER"),
    ])
    return load_sbom(team, bom(COMPONENTS), project="shop", version="2.1")


def by_id(findings):
    return {f["vulnerability"]["vulnId"]: f for f in findings}


def test_lookup_answers_the_project_version_as_dependency_track_does(api, team, shop):
    r = api(team, "read").get("/api/v1/project/lookup?name=shop&version=2.1")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["uuid"] == str(shop.uuid)
    assert (body["name"], body["version"]) == ("shop", "2.1")
    assert body["classifier"] == "APPLICATION" and body["active"] is True
    sbom = Sbom.objects.get(project_version=shop)
    assert body["lastBomImport"] == int(sbom.created_at.timestamp() * 1000)
    assert body["lastBomImportFormat"] == "CycloneDX 1.5"
    assert body["metrics"]["findingsTotal"] == 3
    assert body["lastInheritedRiskScore"] == body["metrics"]["inheritedRiskScore"]
    # By uuid too (the Maven plugin's ProjectClient with a project uuid).
    assert api(team, "read").get(f"/api/v1/project/{shop.uuid}").json()["name"] == "shop"


def test_lookup_without_a_name_is_a_400_naming_it(api, team, shop):
    r = api(team, "read").get("/api/v1/project/lookup?version=2.1")
    assert r.status_code == 400
    assert r.json()["param"] == "name" and "name" in r.json()["detail"] + str(r.json())


def test_lookup_of_an_unknown_or_another_teams_project_is_a_404(api, team, other_team, shop):
    assert api(team, "read").get("/api/v1/project/lookup?name=shop&version=9").status_code == 404
    assert api(team, "read").get("/api/v1/project/lookup?name=nope").status_code == 404
    intruder = api(other_team, "read")
    assert intruder.get("/api/v1/project/lookup?name=shop&version=2.1").status_code == 404
    for path in (
        f"/api/v1/project/{shop.uuid}",
        f"/api/v1/finding/project/{shop.uuid}",
        f"/api/v1/metrics/project/{shop.uuid}/current",
        f"/api/v1/metrics/project/{shop.uuid}/refresh",
        f"/api/v1/violation/project/{shop.uuid}",
    ):
        r = intruder.get(path)
        assert r.status_code == 404, path
        # The problem's detail says what is missing (not "invalid fields").
        assert r.json()["detail"] == "The project could not be found.", r.content
        assert "errors" not in r.json()
        assert api(team, "read").get(path).status_code == 200, path


def test_findings_have_dependency_tracks_shape_and_trustranks_rank(api, team, shop):
    r = api(team, "read").get(f"/api/v1/finding/project/{shop.uuid}")
    assert r.status_code == 200
    assert r["X-Total-Count"] == "3"
    found = by_id(r.json())
    assert set(found) == {"CVE-2020-8203", "CVE-2021-44906", "GHSA-rv95-896h-c2vc"}
    lodash = found["CVE-2020-8203"]
    component = lodash["component"]
    assert (component["name"], component["version"], component["purl"]) == (
        "lodash", "4.17.15", "pkg:npm/lodash@4.17.15")
    assert component["project"] == str(shop.uuid) and uuid.UUID(component["uuid"])
    assert "group" in component
    vuln = lodash["vulnerability"]
    assert vuln["source"] == "NVD" and vuln["severity"] == "CRITICAL"
    assert vuln["severityRank"] == 0 and vuln["cvssV3BaseScore"] == pytest.approx(9.8)
    assert "epssScore" in vuln and uuid.UUID(vuln["uuid"])
    assert vuln["aliases"] == [{"cveId": "CVE-2020-8203", "ghsaId": "GHSA-p6mc-m468-83gw"}]
    assert [c["cweId"] for c in vuln["cwes"]] == [770, 1321]
    assert vuln["title"]
    assert lodash["analysis"] == {"state": "NOT_SET", "isSuppressed": False}
    assert lodash["attribution"]["analyzerIdentity"] == "INTERNAL_ANALYZER"
    assert isinstance(lodash["attribution"]["attributedOn"], int)
    assert lodash["matrix"] == f"{shop.uuid}:{component['uuid']}:{vuln['uuid']}"
    assert {"decision", "rank", "score"} <= set(lodash)
    assert found["CVE-2021-44906"]["vulnerability"]["severity"] == "MEDIUM"
    express = found["GHSA-rv95-896h-c2vc"]["vulnerability"]
    assert express["severity"] == "UNASSIGNED" and express["severityRank"] == 5
    assert express["source"] == "GITHUB"
    # The same ids on every read: a plugin can compare builds.
    again = by_id(api(team, "read").get(f"/api/v1/finding/project/{shop.uuid}").json())
    assert again["CVE-2020-8203"]["matrix"] == lodash["matrix"]


def triage(client, finding_id, state, **extra):
    r = client.post(f"/api/v1/findings/{finding_id}/triage",
                    {"state": state, "reason": "checked", **extra}, format="json")
    assert r.status_code == 200, r.content


def test_triage_states_map_and_closed_findings_are_suppressed(api, team, shop):
    client = api(team, "read", "triage")
    url = f"/api/v1/finding/project/{shop.uuid}"
    ids = by_id(client.get(url).json())
    triage(client, ids["CVE-2020-8203"]["finding_id"], "not_affected",
           justification="code_not_reachable")
    triage(client, ids["CVE-2021-44906"]["finding_id"], "exploitable")
    triage(client, ids["GHSA-rv95-896h-c2vc"]["finding_id"], "in_triage")
    shown = by_id(client.get(url).json())
    assert set(shown) == {"CVE-2021-44906", "GHSA-rv95-896h-c2vc"}
    assert shown["CVE-2021-44906"]["analysis"]["state"] == "EXPLOITABLE"
    assert shown["GHSA-rv95-896h-c2vc"]["analysis"]["state"] == "IN_TRIAGE"
    everything = by_id(client.get(url + "?suppressed=true").json())
    assert everything["CVE-2020-8203"]["analysis"]["state"] == "NOT_AFFECTED"
    assert everything["CVE-2020-8203"]["analysis"]["isSuppressed"] is True
    assert client.get(url + "?suppressed=false").json() == client.get(url).json()
    Finding.objects.filter(pk=ids["CVE-2021-44906"]["finding_id"]).update(state="resolved")
    assert by_id(client.get(url + "?suppressed=true").json())["CVE-2021-44906"]["analysis"][
        "state"] == "RESOLVED"
    Finding.objects.filter(pk=ids["CVE-2021-44906"]["finding_id"]).update(
        state="false_positive")
    assert by_id(client.get(url + "?suppressed=true").json())["CVE-2021-44906"]["analysis"][
        "state"] == "FALSE_POSITIVE"


def test_metrics_count_what_the_findings_list_shows(api, team, shop):
    client = api(team, "read", "triage")
    url = f"/api/v1/finding/project/{shop.uuid}"
    triage(client, by_id(client.get(url).json())["CVE-2021-44906"]["finding_id"],
           "false_positive")
    listed = client.get(url).json()
    metrics = client.get(f"/api/v1/metrics/project/{shop.uuid}/current").json()
    for severity in ("critical", "high", "medium", "low", "unassigned"):
        shown = sum(f["vulnerability"]["severity"] == severity.upper() for f in listed)
        assert metrics[severity] == shown, severity
    assert (metrics["critical"], metrics["medium"], metrics["unassigned"]) == (1, 0, 1)
    assert metrics["vulnerabilities"] == metrics["findingsTotal"] == len(listed) == 2
    assert metrics["suppressed"] == 1
    assert metrics["vulnerableComponents"] == 2 and metrics["components"] == 4
    assert metrics["findingsAudited"] + metrics["findingsUnaudited"] == 2
    assert metrics["inheritedRiskScore"] == 10 + 5
    assert metrics["policyViolationsTotal"] == 0 and metrics["policyViolationsFail"] == 0
    assert metrics["firstOccurrence"] <= metrics["lastOccurrence"]
    refreshed = client.get(f"/api/v1/metrics/project/{shop.uuid}/refresh")
    assert refreshed.status_code == 200


def test_source_filter_and_paging_with_a_total_count(api, team, shop):
    client = api(team, "read")
    url = f"/api/v1/finding/project/{shop.uuid}"
    nvd = client.get(url + "?source=NVD").json()
    assert {f["vulnerability"]["vulnId"] for f in nvd} == {"CVE-2020-8203", "CVE-2021-44906"}
    github = client.get(url + "?source=GITHUB").json()
    assert [f["vulnerability"]["vulnId"] for f in github] == ["GHSA-rv95-896h-c2vc"]
    assert client.get(url + "?source=SNYK").json() == []
    bad = client.get(url + "?source=MADEUP")
    assert bad.status_code == 400 and bad.json()["param"] == "source"
    whole = client.get(url).json()
    first = client.get(url + "?pageNumber=1&pageSize=2")
    second = client.get(url + "?pageNumber=2&pageSize=2")
    assert first["X-Total-Count"] == second["X-Total-Count"] == "3"
    assert first.json() + second.json() == whole
    assert client.get(url + "?offset=1&limit=1").json() == whole[1:2]
    # In TrustRank's order: by rank, the unranked by baseline priority (critical first).
    assert whole[0]["vulnerability"]["vulnId"] == "CVE-2020-8203"


@pytest.mark.parametrize(
    ("query", "param"),
    [("?pageSize=x", "pageSize"), ("?pageNumber=0&pageSize=1", "pageNumber"),
     ("?suppressed=maybe", "suppressed"), ("?severity=high", "severity"),
     ("?pageSize=100000", "pageSize")],
)
def test_bad_parameters_are_400s_naming_them(api, team, shop, query, param):
    r = api(team, "read").get(f"/api/v1/finding/project/{shop.uuid}{query}")
    assert r.status_code == 400 and r.json()["param"] == param


def test_a_project_uuid_that_is_not_a_uuid_is_a_400(api, team, shop):
    r = api(team, "read").get("/api/v1/finding/project/not-a-uuid")
    assert r.status_code == 400 and r.json()["param"] == "uuid"
    assert api(team, "read").get(f"/api/v1/finding/project/{uuid.uuid4()}").status_code == 404


def test_x_api_key_and_the_read_scope_are_required(api, team, shop, client):
    url = f"/api/v1/finding/project/{shop.uuid}"
    assert client.get(url).status_code in (401, 403)
    assert client.get(url, HTTP_X_API_KEY="not-a-key").status_code in (401, 403)
    assert api(team, "sbom:write").get(url).status_code == 403
    assert api(team, "read").get(url).status_code == 200
    for path in ("/api/v1/project/lookup?name=shop&version=2.1",
                 f"/api/v1/metrics/project/{shop.uuid}/current"):
        assert api(team, "sbom:write").get(path).status_code == 403
    # Refreshing changes nothing: an upload key may ask, as the Maven plugin's upload goal does.
    assert api(team, "sbom:write").get(
        f"/api/v1/metrics/project/{shop.uuid}/refresh").status_code == 200


def test_the_findings_list_is_one_query_however_many_findings(
    api, team, shop, django_assert_max_num_queries
):
    client = api(team, "read")
    client.get("/api/v1/projects")  # warm the key cache
    with django_assert_max_num_queries(6):
        assert len(client.get(f"/api/v1/finding/project/{shop.uuid}").json()) == 3


def test_project_list_filters_by_name_with_a_total(api, team, other_team, shop):
    load_sbom(team, bom(COMPONENTS[:1]), project="shop", version="2.2")
    load_sbom(team, bom(COMPONENTS[:1]), project="other", version="1")
    load_sbom(other_team, bom(COMPONENTS[:1]), project="shop", version="7")
    client = api(team, "read")
    r = client.get("/api/v1/project?name=shop")
    assert [(p["name"], p["version"]) for p in r.json()] == [("shop", "2.1"), ("shop", "2.2")]
    assert r["X-Total-Count"] == "2"
    paged = client.get("/api/v1/project?pageNumber=1&pageSize=500&excludeInactive=true"
                       "&sortName=name&sortOrder=asc")
    assert [p["name"] for p in paged.json()] == ["other", "shop", "shop"]
    latest = {p["version"]: p["isLatest"] for p in r.json()}
    assert latest == {"2.1": False, "2.2": True}


def test_violations_are_an_empty_list(api, team, shop):
    r = api(team, "read").get(f"/api/v1/violation/project/{shop.uuid}?pageNumber=1&pageSize=100")
    assert r.status_code == 200 and r.json() == [] and r["X-Total-Count"] == "0"


def test_team_self_lists_the_keys_permissions(api, team):
    body = api(team, "read", "sbom:write").get("/api/v1/team/self").json()
    assert body["name"] == team.name and uuid.UUID(body["uuid"])
    names = {p["name"] for p in body["permissions"]}
    assert {"VIEW_PORTFOLIO", "VIEW_VULNERABILITY", "BOM_UPLOAD"} <= names
    assert "PORTFOLIO_MANAGEMENT" not in names


def test_team_self_for_a_signed_in_user_is_a_400(client, make_user, team):
    client.force_login(make_user("alice", team=team))
    r = client.get("/api/v1/team/self")
    assert r.status_code == 400


def test_token_is_processing_until_the_sbom_is_matched(api, team):
    from tests.vulns.helpers import run_job

    client = api(team, "read", "sbom:write")
    job = run_job(team, "sbom", bom(COMPONENTS),
                  params={"projectName": "late", "projectVersion": "1", "autoCreate": True})
    assert job.status == "done"
    sbom = Sbom.objects.get(pk=job.result["sbom_id"])
    # The job matched in its own transaction: once it is done, the findings are there.
    assert sbom.matched_at is not None and job.result["matching"]["components"] == len(COMPONENTS)
    for prefix in ("/api/v1/event/token/", "/api/v1/bom/token/"):
        assert client.get(f"{prefix}{job.pk}").json() == {"processing": False}
    # An SBOM stored before its job matched too waits for its match.
    Sbom.objects.filter(pk=sbom.pk).update(matched_at=None)
    for prefix in ("/api/v1/event/token/", "/api/v1/bom/token/"):
        assert client.get(f"{prefix}{job.pk}").json() == {"processing": True}
    from trustrank.vulns.services.matching import findings_match_project_version

    findings_match_project_version(project_version_id=sbom.project_version_id)
    assert client.get(f"/api/v1/event/token/{job.pk}").json() == {"processing": False}


def test_an_identical_upload_matches_an_sbom_whose_match_never_finished(team):
    from tests.vulns.helpers import run_job

    params = {"projectName": "again", "projectVersion": "1", "autoCreate": True}
    first = run_job(team, "sbom", bom(COMPONENTS), params=params)
    sbom_id = first.result["sbom_id"]
    Sbom.objects.filter(pk=sbom_id).update(matched_at=None)  # stored before jobs matched
    again = run_job(team, "sbom", bom(COMPONENTS), params=params)
    assert again.result["duplicate"] and again.result["sbom_id"] == sbom_id
    assert "matching" in again.result and Sbom.objects.get(pk=sbom_id).matched_at is not None
    # A matched one is not matched again.
    third = run_job(team, "sbom", bom(COMPONENTS), params=params)
    assert third.result["duplicate"] and "matching" not in third.result


def test_unknown_token_is_not_processing_and_a_malformed_one_is_a_400(api, team, other_team):
    client = api(team, "read")
    assert client.get(f"/api/v1/event/token/{uuid.uuid4()}").json() == {"processing": False}
    r = client.get("/api/v1/event/token/not-a-token")
    assert r.status_code == 400 and r.json()["param"] == "token"


def test_version_and_powered_by_pass_the_jenkins_connection_test(api, team):
    client = api(team, "read", "sbom:write")
    assert client.get("/api/version").json()["version"] == "4.12.0"
    listed = client.get("/api/v1/project?pageNumber=1&pageSize=500&excludeInactive=true"
                        "&sortName=name&sortOrder=asc")
    assert listed["X-Powered-By"].startswith("Dependency-Track v")
    names = {p["name"] for p in client.get("/api/v1/team/self").json()["permissions"]}
    # PluginUtil.buildRequiredPermissions(synchronous=true, projectProperties=false).
    assert {"BOM_UPLOAD", "VIEW_PORTFOLIO", "VULNERABILITY_ANALYSIS", "VIEW_VULNERABILITY",
            "VIEW_POLICY_VIOLATION"} <= names
    from rest_framework.test import APIClient

    assert APIClient().get("/api/version").status_code in (401, 403)


def test_lookup_names_an_spdx_upload_as_spdx(api, team):
    spdx = (DATA / "sbom" / "spdx" / "real" / "spdx-2.2_trivy_centos-7.spdx.json").read_bytes()
    load_sbom(team, spdx, project="centos", version="7")
    r = api(team, "read").get("/api/v1/project/lookup?name=centos&version=7")
    assert r.status_code == 200, r.content
    assert r.json()["lastBomImportFormat"] == "SPDX 2.2"
