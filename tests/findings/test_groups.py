"""Findings grouped by the upgrade that fixes them and by vulnerability across projects:
the version math per ecosystem, "no fix yet", the API and the page."""

from __future__ import annotations

import itertools

import pytest

from trustrank.findings.groups import smallest_fix_above
from trustrank.findings.models import Finding
from trustrank.inventory.models import Project
from trustrank.ranking.models import RankContext, RankedFinding
from trustrank.ranking.ranks import rank_sql

pytestmark = pytest.mark.django_db

_seq = itertools.count(1)


def project(team, name: str) -> Project:
    return Project.objects.get_or_create(team=team, name=name)[0]


def vf(team, proj, *, eco: str, pkg: str, version: str, fixed: list[str], vuln: str = "",
       state: str = "in_triage", kev: bool = False, severity: str = "high",
       decision: str | None = None, rank: int | None = None, aliases=None) -> Finding:
    n = next(_seq)
    vuln = vuln or f"GHSA-test-{n:04d}"
    f = Finding.objects.create(
        team=team, kind="vulnerability", source="osv", fingerprint=f"fp-{n}",
        project=proj, ecosystem=eco, package_name=pkg, component_name=pkg.split(":")[-1],
        component_version=version, fixed_versions=fixed, vuln_id=vuln,
        aliases=aliases if aliases is not None else [vuln], cve_id="", in_kev=kev,
        severity=severity, state=state,
    )
    if decision is not None:
        ctx, _ = RankContext.objects.get_or_create(digest="t" * 64, defaults={"data": {}})
        RankedFinding.objects.create(
            finding=f, team=team, rank=rank or n, env_rank=rank or n, qkey=rank or n, score=1.0,
            decision=decision, context=ctx,
        )
    return f


# --- the version math, per ecosystem ---------------------------------------------------------


@pytest.mark.parametrize(
    ("ecosystem", "installed", "fixed", "expected"),
    [
        # npm SemVer: 1.10.0 > 1.9.0 (a string comparison would say otherwise).
        ("npm", "1.2.5", ["0.2.4", "1.2.6"], "1.2.6"),
        ("npm", "0.0.8", ["1.2.6", "0.2.4"], "0.2.4"),
        ("npm", "1.9.0", ["1.10.0", "1.9.1-beta.1"], "1.9.1-beta.1"),
        ("npm", "2.0.0", ["1.2.6"], None),  # no fix above the installed version
        # PyPI PEP 440: 2.0rc1 < 2.0 < 2.0.post1; 1.10 > 1.9.
        ("PyPI", "1.9", ["1.10", "2.0rc1"], "1.10"),
        ("PyPI", "2.0rc1", ["2.0", "2.0.post1"], "2.0"),
        # Maven: 2.17.1 > 2.17.0 > 2.17.0-rc1; 2.3.1 < 2.12.2.
        ("Maven", "2.14.1", ["2.12.2", "2.3.1", "2.15.0"], "2.15.0"),
        ("Maven", "2.17.0-rc1", ["2.17.0", "2.17.1"], "2.17.0"),
        ("Unheard-of", "1.0", ["2.0"], None),  # no scheme: not comparable
        ("npm", "1.0.0", [], None),
        # An installed version the scheme cannot read: only the greatest fix surely closes it.
        ("npm", "not-a-version", ["1.2.3", "2.0.0", "0.9.0"], "2.0.0"),
    ],
)
def test_smallest_fix_above_the_installed_version(ecosystem, installed, fixed, expected):
    assert smallest_fix_above(ecosystem=ecosystem, installed=installed, fixed=fixed) == expected


@pytest.fixture
def estate(team, other_team):
    """minimist (npm) in three projects: two branches of fixes; the group needs 1.2.6.
    jackson-databind (Maven) where 2.12.7.1 > 2.12.7 > 2.9.10.8 matters; a PyPI package
    with a release candidate; a package with no fix at all."""
    a, b, c = project(team, "shop"), project(team, "billing"), project(team, "search")
    ids = {}
    ids["m1"] = vf(team, a, eco="npm", pkg="minimist", version="1.2.5", fixed=["0.2.4", "1.2.6"],
                   vuln="GHSA-xvch-5gv4-984h", decision="out-of-cycle", rank=5).pk
    ids["m2"] = vf(team, b, eco="npm", pkg="minimist", version="0.0.8", fixed=["0.2.4", "1.2.6"],
                   vuln="GHSA-xvch-5gv4-984h", kev=True, decision="scheduled", rank=9).pk
    ids["m3"] = vf(team, c, eco="npm", pkg="minimist", version="1.2.0", fixed=["1.2.3"],
                   vuln="GHSA-vh95-rmgr-6w4m").pk
    ids["m4"] = vf(team, a, eco="npm", pkg="minimist", version="0.0.10", fixed=["1.2.3", "0.2.1"],
                   vuln="GHSA-vh95-rmgr-6w4m").pk
    # A fifth minimist finding no version fixes: counted apart.
    ids["m5"] = vf(team, c, eco="npm", pkg="minimist", version="1.2.8", fixed=[],
                   vuln="GHSA-nofx-0000-0000").pk
    # Resolved findings are not to be fixed.
    vf(team, a, eco="npm", pkg="minimist", version="1.2.5", fixed=["9.9.9"], state="resolved")
    ids["j1"] = vf(team, a, eco="Maven", pkg="com.fasterxml.jackson.core:jackson-databind",
                   version="2.12.6", fixed=["2.12.7.1", "2.13.4.1"],
                   decision="immediate", rank=1).pk
    ids["j2"] = vf(team, b, eco="Maven", pkg="com.fasterxml.jackson.core:jackson-databind",
                   version="2.9.10", fixed=["2.9.10.8", "2.12.7"]).pk
    ids["p1"] = vf(team, c, eco="PyPI", pkg="django", version="4.2rc1",
                   fixed=["4.2", "4.1.10"], decision="defer", rank=20).pk
    ids["p2"] = vf(team, c, eco="PyPI", pkg="django", version="4.1.9", fixed=["4.1.10", "4.2"],
                   decision="defer", rank=21).pk
    ids["n1"] = vf(team, b, eco="npm", pkg="left-pad", version="1.0.0", fixed=[]).pk
    # Another team's minimist: never counted, never named.
    vf(other_team, project(other_team, "secret-project"), eco="npm", pkg="minimist",
       version="0.0.1", fixed=["99.0.0"], decision="immediate", rank=1)
    return ids


def _by_package(results):
    return {g["package"]: g for g in results}


def test_groups_by_fix_name_the_smallest_version_that_fixes_every_finding(api, team, estate):
    body = api(team, "read").get("/api/v1/findings/groups?by=fix").json()
    assert body["count"] == 4
    groups = _by_package(body["results"])
    m = groups["minimist"]
    # 1.2.5 -> 1.2.6, 0.0.8 -> 0.2.4, 1.2.0 -> 1.2.3, 0.0.10 -> 0.2.1: the maximum is 1.2.6.
    assert m["target_version"] == "1.2.6" and m["ecosystem"] == "npm"
    assert m["findings_closed"] == 4 and m["projects_affected"] == 3
    assert m["sentence"] == "upgrade minimist to 1.2.6 closes 4 findings in 3 projects"
    assert sorted(m["finding_ids"]) == sorted(estate[k] for k in ("m1", "m2", "m3", "m4"))
    assert {p["name"] for p in m["projects"]} == {"shop", "billing", "search"}
    assert m["project_names"] == ["billing", "search", "shop"] and m["no_fix_count"] == 1
    assert m["highest_decision"] == "out-of-cycle" and m["kev_count"] == 1
    assert m["no_fix"]["count"] == 1 and m["no_fix"]["finding_ids"] == [estate["m5"]]
    j = groups["com.fasterxml.jackson.core:jackson-databind"]
    # 2.12.6 -> 2.12.7.1; 2.9.10 -> 2.9.10.8: Maven orders 2.12.7.1 above 2.9.10.8.
    assert j["target_version"] == "2.12.7.1" and j["findings_closed"] == 2
    assert j["highest_decision"] == "immediate"
    d = groups["django"]
    # 4.2rc1 -> 4.2 and 4.1.9 -> 4.1.10: PEP 440 puts 4.2 above 4.1.10.
    assert d["target_version"] == "4.2" and d["sentence"].startswith("upgrade django to 4.2 ")
    lp = groups["left-pad"]
    assert lp["target_version"] is None and lp["findings_closed"] == 0
    assert lp["no_fix"]["count"] == 1 and lp["sentence"].startswith("no fix yet for 1 finding")
    # Most urgent first: immediate (jackson), out-of-cycle (minimist), defer (django), unranked.
    assert [g["package"] for g in body["results"]] == [
        "com.fasterxml.jackson.core:jackson-databind", "minimist", "django", "left-pad",
    ]


def test_groups_take_the_findings_list_filters(api, team, estate):
    client = api(team, "read")
    shop = Project.objects.get(team=team, name="shop")
    body = client.get(f"/api/v1/findings/groups?by=fix&project={shop.pk}").json()
    m = _by_package(body["results"])["minimist"]
    assert m["findings_closed"] == 2 and m["target_version"] == "1.2.6"
    assert m["sentence"] == "upgrade minimist to 1.2.6 closes 2 findings in 1 project"
    kev = client.get("/api/v1/findings/groups?by=fix&kev=true").json()
    assert [g["package"] for g in kev["results"]] == ["minimist"]
    assert kev["results"][0]["target_version"] == "0.2.4"
    q = client.get("/api/v1/findings/groups?by=fix&q=djan").json()
    assert [g["package"] for g in q["results"]] == ["django"]
    bad = client.get("/api/v1/findings/groups?by=fix&severity=apocalyptic")
    assert bad.status_code == 400 and "severity" in bad.json()["errors"]


def test_a_multiple_choice_filter_does_not_change_the_counts(api, team, estate):
    body = api(team, "read").get(
        "/api/v1/findings/groups?by=fix&decision=out-of-cycle&decision=scheduled"
    ).json()
    m = _by_package(body["results"])["minimist"]
    assert m["findings_closed"] == 2 and m["target_version"] == "1.2.6"


def test_a_filter_across_a_to_many_relation_counts_each_finding_once(team, estate):
    from trustrank.findings.groups import fix_groups
    from trustrank.findings.records import Comment

    f = Finding.objects.get(pk=estate["m1"])
    for body in ("first look", "second look"):
        Comment.objects.create(finding=f, author_label="alice", body=body)
    qs = Finding.objects.filter(team=team, comments__body__contains="look")
    page = fix_groups(qs=qs, limit=10, offset=0, rank_sql=rank_sql)
    assert page.count == 1 and page.groups[0].findings_closed == 1
    assert page.groups[0].finding_ids == (estate["m1"],)


def test_groups_are_paginated_with_a_count(api, team, estate):
    client = api(team, "read")
    first = client.get("/api/v1/findings/groups?by=fix&page_size=3").json()
    assert first["count"] == 4 and len(first["results"]) == 3 and first["next"]
    second = client.get(first["next"]).json()
    assert [g["package"] for g in second["results"]] == ["left-pad"] and second["next"] is None
    assert second["previous"]
    past = client.get("/api/v1/findings/groups?by=fix&page=9").json()
    assert past["count"] == 4 and past["results"] == []


def test_groups_by_vulnerability_across_projects(api, team, estate):
    body = api(team, "read").get("/api/v1/findings/groups?by=vulnerability").json()
    groups = {g["vuln_id"]: g for g in body["results"]}
    g = groups["GHSA-xvch-5gv4-984h"]
    assert g["findings_count"] == 2 and g["open_count"] == 2
    assert {p["name"] for p in g["projects"]} == {"shop", "billing"}
    assert sorted(g["components"]) == ["minimist@0.0.8", "minimist@1.2.5"]
    assert sorted(g["versions"]) == ["0.0.8", "1.2.5"] and g["in_kev"] is True
    assert g["states"] == {"in_triage": 2} and g["highest_decision"] == "out-of-cycle"
    assert sorted(g["finding_ids"]) == sorted([estate["m1"], estate["m2"]])
    # Open only by default; all states on request.
    assert sum(x["findings_count"] for x in body["results"]) == 10
    every = api(team, "read").get(
        "/api/v1/findings/groups?by=vulnerability&state=resolved"
    ).json()
    assert every["count"] == 1 and every["results"][0]["states"] == {"resolved": 1}
    every = api(team, "read").get("/api/v1/findings/groups?by=vulnerability&open=").json()
    assert sum(x["findings_count"] for x in every["results"]) == 11


def test_other_teams_findings_are_never_grouped(api, team, other_team, estate):
    mine = api(team, "read").get("/api/v1/findings/groups?by=fix").json()
    assert all(p["name"] != "secret-project" for g in mine["results"] for p in g["projects"])
    assert _by_package(mine["results"])["minimist"]["target_version"] == "1.2.6"
    theirs = api(other_team, "read").get("/api/v1/findings/groups?by=fix").json()
    assert theirs["count"] == 1
    assert theirs["results"][0]["sentence"] == (
        "upgrade minimist to 99.0.0 closes 1 finding in 1 project"
    )
    vulns = api(other_team, "read").get("/api/v1/findings/groups?by=vulnerability").json()
    assert vulns["count"] == 1


@pytest.mark.parametrize("by", ["", "package", "FIX"])
def test_an_unknown_by_is_refused_naming_it(api, team, estate, by):
    r = api(team, "read").get(f"/api/v1/findings/groups?by={by}")
    assert r.status_code == 400
    assert "by" in r.json()["errors"] and "`by`" in r.json()["detail"]


def test_groups_default_to_fix_when_by_is_absent(api, team, estate):
    bare = api(team, "read").get("/api/v1/findings/groups").json()
    assert bare["by"] == "fix"
    assert bare == api(team, "read").get("/api/v1/findings/groups?by=fix").json()


def test_groups_need_a_read_key(client, api, team, estate):
    assert client.get("/api/v1/findings/groups?by=fix").status_code in (401, 403)
    assert api(team, "sbom:write").get("/api/v1/findings/groups?by=fix").status_code == 403


def test_groups_query_count_does_not_grow_with_groups(
    api, team, estate, django_assert_max_num_queries
):
    client = api(team, "read")
    client.get("/api/v1/findings/groups?by=fix")  # warm the key cache
    with django_assert_max_num_queries(8):
        client.get("/api/v1/findings/groups?by=fix")
    with django_assert_max_num_queries(8):
        client.get("/api/v1/findings/groups?by=vulnerability")


def test_groups_page_renders_both_groupings_with_links(client, make_user, team, estate):
    client.force_login(make_user("alice", team=team))
    page = client.get("/findings/groups/?by=fix")
    html = page.content.decode()
    assert page.status_code == 200
    assert "upgrade minimist to 1.2.6 closes 4 findings in 3 projects" in html
    assert "/findings/?q=minimist&amp;open=true" in html
    assert f"/findings/{estate['m1']}/" in html
    assert "no fix yet for 1 finding of left-pad in 1 project" in html
    vuln = client.get("/findings/groups/?by=vulnerability").content.decode()
    assert "GHSA-xvch-5gv4-984h" in vuln and "minimist@0.0.8" in vuln
    assert "secret-project" not in html + vuln
    fragment = client.get("/findings/groups/?by=fix", HTTP_HX_REQUEST="true").content.decode()
    assert "<table" in fragment and "<html" not in fragment
    assert client.get("/findings/groups/?by=nonsense").status_code == 400
    shop = Project.objects.get(team=team, name="shop")
    filtered = client.get(f"/findings/groups/?by=fix&project={shop.pk}").content.decode()
    assert "closes 2 findings in 1 project" in filtered
    assert f"/findings/?project={shop.pk}&amp;q=minimist&amp;open=true" in filtered


def test_the_groups_page_offers_projects_by_name_until_there_are_too_many(
        client, make_user, team, estate, monkeypatch):
    from trustrank.findings import group_views

    client.force_login(make_user("alice", team=team))
    shop = Project.objects.get(team=team, name="shop")
    html = client.get(f"/findings/groups/?by=fix&project={shop.pk}").content.decode()
    assert f'<option value="{shop.pk}" selected>shop</option>' in html
    assert 'placeholder="project id"' not in html
    # Past the limit (twenty thousand options were most of the page's time) the filter
    # takes an id, and still filters.
    monkeypatch.setattr(group_views, "PROJECT_CHOICES_MAX", 2)
    html = client.get(f"/findings/groups/?by=fix&project={shop.pk}").content.decode()
    assert f'name="project" placeholder="project id" value="{shop.pk}"' in html
    assert "<option value=" not in html.split('name="project"')[1].split("</label>")[0]
    assert "closes 2 findings in 1 project" in html


# --- kept pages ----------------------------------------------------------------------------


def _aggregates(queries) -> int:
    """How many of `queries` were a groups aggregate (groups.group_page_sql's)."""
    return sum("WITH per_team AS" in q["sql"] for q in queries)


@pytest.mark.parametrize("by", ["fix", "vulnerability"])
def test_a_group_page_is_kept_until_a_finding_of_the_team_is_written(api, team, estate, by):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api(team, "read")
    url = f"/api/v1/findings/groups?by={by}"
    with CaptureQueriesContext(connection) as first:
        body = client.get(url).json()
    with CaptureQueriesContext(connection) as again:
        assert client.get(url).json() == body
    assert _aggregates(first.captured_queries) == 1
    assert _aggregates(again.captured_queries) == 0
    # Another slice or filter is its own page.
    with CaptureQueriesContext(connection) as other:
        client.get(url + "&page_size=2")
        client.get(url + "&kev=true")
    assert _aggregates(other.captured_queries) == 2
    # A written finding moves the team's generation: the page is computed again.
    Finding.objects.filter(pk=estate["m2"]).update(state="resolved")
    f = Finding.objects.get(pk=estate["m1"])
    f.state = "resolved"
    f.save()
    with CaptureQueriesContext(connection) as after:
        moved = client.get(url).json()
    assert _aggregates(after.captured_queries) == 1
    if by == "fix":
        m = _by_package(moved["results"])["minimist"]
        assert m["findings_closed"] == 2 and estate["m1"] not in m["finding_ids"]
    else:
        assert "GHSA-xvch-5gv4-984h" not in {g["vuln_id"] for g in moved["results"]}


def test_a_kept_group_page_names_its_projects_as_they_are_now(api, team, estate):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api(team, "read")
    client.get("/api/v1/findings/groups?by=fix")
    client.get("/api/v1/findings/groups?by=vulnerability")
    # A project renamed writes no finding: the kept pages serve, with the new name.
    Project.objects.filter(team=team, name="billing").update(name="zz-billing")
    with CaptureQueriesContext(connection) as kept:
        fix = client.get("/api/v1/findings/groups?by=fix").json()
        vuln = client.get("/api/v1/findings/groups?by=vulnerability").json()
    assert _aggregates(kept.captured_queries) == 0
    m = _by_package(fix["results"])["minimist"]
    assert m["project_names"] == ["search", "shop", "zz-billing"]
    g = {g["vuln_id"]: g for g in vuln["results"]}["GHSA-xvch-5gv4-984h"]
    # A vulnerability group lists its projects in name order.
    assert [p["name"] for p in g["projects"]] == ["shop", "zz-billing"]


def test_the_groups_page_is_kept_per_team(api, team, other_team, estate):
    """Two teams' identical filters are two pages: the key holds the filter's SQL (the
    caller's teams) and their generation."""
    mine = api(team, "read").get("/api/v1/findings/groups?by=fix").json()
    theirs = api(other_team, "read").get("/api/v1/findings/groups?by=fix").json()
    assert mine["count"] == 4 and theirs["count"] == 1
    assert theirs["results"][0]["project_names"] == ["secret-project"]
    assert "secret-project" not in {n for g in mine["results"] for n in g["project_names"]}
