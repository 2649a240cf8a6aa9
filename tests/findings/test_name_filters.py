"""The findings list's reference filters take names as well as ids, as Dependency-Track
clients name things: `project=shop` as `project=<id>`, `project_version=<uuid>`,
`team=<name>`, `service=<name>`. An unknown name is an empty list, as an unknown id is."""

from __future__ import annotations

import pytest

from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.findings.models import Finding
from trustrank.runtime.models import Environment, Service

pytestmark = pytest.mark.django_db

LODASH = ("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")
MINIMIST = ("minimist", "0.0.8", "pkg:npm/minimist@0.0.8")


@pytest.fixture
def two_projects(team, other_team):
    for t in (team, other_team):
        import_osv(t, [
            osv("GHSA-p6mc-m468-83gw", "npm", "lodash", [{"introduced": "0"},
                {"fixed": "4.17.20"}], aliases=["CVE-2020-8203"], range_type="SEMVER"),
            osv("GHSA-xvch-5gv4-984h", "npm", "minimist", [{"introduced": "0"},
                {"fixed": "0.2.4"}], aliases=["CVE-2021-44906"], range_type="SEMVER"),
        ])
    shop = load_sbom(team, bom([LODASH]), project="shop", version="1")
    blog = load_sbom(team, bom([MINIMIST]), project="blog", version="1")
    # Another team's project of the same name: never theirs to see through a name.
    load_sbom(other_team, bom([MINIMIST]), project="shop", version="1")
    return {"shop": shop, "blog": blog}


def vulns(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {f["vuln_id"] for f in response.json()["results"]}


def test_project_by_name_is_the_same_as_by_id(api, team, two_projects):
    client = api(team, "read")
    shop = two_projects["shop"]
    by_id = vulns(client.get(f"/api/v1/findings?project={shop.project_id}"))
    assert by_id == {"CVE-2020-8203"}
    assert vulns(client.get("/api/v1/findings?project=shop")) == by_id
    assert vulns(client.get("/api/v1/findings?project=blog")) == {"CVE-2021-44906"}


def test_an_unknown_project_name_is_an_empty_list_like_an_unknown_id(api, team, two_projects):
    client = api(team, "read")
    assert vulns(client.get("/api/v1/findings?project=nothing-by-that-name")) == set()
    assert vulns(client.get("/api/v1/findings?project=987654")) == set()


def test_another_teams_project_name_shows_nothing_of_theirs(api, other_team, two_projects):
    theirs = api(other_team, "read")
    assert vulns(theirs.get("/api/v1/findings?project=shop")) == {"CVE-2021-44906"}
    assert vulns(theirs.get("/api/v1/findings?project=blog")) == set()


def test_project_version_by_uuid(api, team, two_projects):
    client = api(team, "read")
    shop = two_projects["shop"]
    assert vulns(client.get(f"/api/v1/findings?project_version={shop.uuid}")) == {
        "CVE-2020-8203"}
    assert vulns(client.get(f"/api/v1/findings?project_version={shop.pk}")) == {
        "CVE-2020-8203"}
    assert vulns(client.get(
        "/api/v1/findings?project_version=00000000-0000-0000-0000-000000000000")) == set()


def test_team_by_name_and_a_team_not_yours_is_a_400(api, team, other_team, two_projects):
    client = api(team, "read")
    assert vulns(client.get(f"/api/v1/findings?team={team.name}")) == {
        "CVE-2020-8203", "CVE-2021-44906"}
    r = client.get(f"/api/v1/findings?team={other_team.name}")
    assert r.status_code == 400 and "team" in r.json()["errors"]
    r = client.get(f"/api/v1/findings?team={other_team.pk}")
    assert r.status_code == 400 and "team" in r.json()["errors"]


def test_service_by_name(api, team, two_projects):
    from django.utils import timezone

    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    checkout = Service.objects.create(environment=env, kind="service", name="checkout",
                                      first_seen=now, last_seen=now)
    Finding.objects.filter(project_version=two_projects["shop"]).update(service=checkout)
    client = api(team, "read")
    assert vulns(client.get("/api/v1/findings?service=checkout")) == {"CVE-2020-8203"}
    assert vulns(client.get(f"/api/v1/findings?service={checkout.pk}")) == {"CVE-2020-8203"}
    assert vulns(client.get("/api/v1/findings?service=cart")) == set()


def test_groups_take_the_project_name_too(api, team, two_projects):
    body = api(team, "read").get("/api/v1/findings/groups?by=fix&project=shop")
    assert body.status_code == 200, body.content
    assert "lodash" in body.content.decode() and "minimist" not in body.content.decode()


def test_a_name_past_the_limit_is_a_400_naming_the_filter(api, team, two_projects):
    r = api(team, "read").get("/api/v1/findings?project=" + "x" * 600)
    assert r.status_code == 400 and "project" in r.json()["errors"]
