"""The priorities queue takes a project by id or by name; an unknown name is an empty queue."""

from __future__ import annotations

import pytest

from tests.exports.helpers import ranked_scenario

pytestmark = pytest.mark.django_db


@pytest.fixture
def ranked(team):
    return ranked_scenario(team)


def ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {row["finding"] for row in response.json()["results"]}


def test_priorities_by_project_name_or_id(api, team, ranked):
    client = api(team, "read")
    log4j, etcd = ranked["log4j"], ranked["etcd"]
    assert {log4j.pk, etcd.pk} <= ids(client.get("/api/v1/priorities"))
    assert ids(client.get("/api/v1/priorities?project=payment-gateway")) == {log4j.pk}
    assert ids(client.get(f"/api/v1/priorities?project={log4j.project_id}")) == {log4j.pk}
    assert ids(client.get("/api/v1/priorities?project=etcd&environment=prod")) == {etcd.pk}
    assert ids(client.get("/api/v1/priorities?project=no-such-project")) == set()


def test_another_teams_project_name_is_empty(api, other_team, ranked):
    assert ids(api(other_team, "read").get("/api/v1/priorities?project=payment-gateway")) == set()
