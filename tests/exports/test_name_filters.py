"""Exports take the findings filters' names (project, project_version uuid) and a team name."""

from __future__ import annotations

import pytest

from tests.exports.helpers import body_of, csv_rows, ranked_scenario

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(team):
    return ranked_scenario(team)


def ids_of(response) -> set[int]:
    assert response.status_code == 200, body_of(response)[:500]
    return {int(r["finding_id"]) for r in csv_rows(body_of(response))}


def test_export_by_project_name_team_name_and_version_uuid(api, team, data):
    client = api(team, "read")
    log4j = data["log4j"]
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "project": "payment-gateway"})
                  ) == {log4j.pk}
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "team": team.name,
                                                 "project": "etcd"})) == {data["etcd"].pk}
    uuid = str(log4j.project_version.uuid)
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "project_version": uuid})
                  ) == {log4j.pk}
    assert ids_of(client.get("/api/v1/exports", {"format": "csv", "project": "nothing"})) == set()


def test_vex_export_of_a_version_named_by_uuid(api, team, data):
    uuid = str(data["log4j"].project_version.uuid)
    r = api(team, "read").get("/api/v1/exports", {"format": "cyclonedx-vex",
                                                  "project_version": uuid})
    assert r.status_code == 200, body_of(r)[:500]
    assert b"CVE-2021-44228" in body_of(r)


def test_unknown_team_name_or_version_uuid_is_a_400_naming_it(api, team, other_team, data):
    client = api(team, "read")
    r = client.get("/api/v1/exports", {"format": "csv", "team": other_team.name})
    assert r.status_code == 400 and r.json()["param"] == "team"
    r = client.get("/api/v1/exports", {"format": "csv",
                                       "project_version": "00000000-0000-0000-0000-000000000000"})
    assert r.status_code == 400 and r.json()["param"] == "project_version"
