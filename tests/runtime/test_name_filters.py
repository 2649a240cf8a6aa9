"""An environment's services by its name (the route's own word) or by its id."""

from __future__ import annotations

import pytest
from django.utils import timezone

from trustrank.runtime.models import Environment, Service

pytestmark = pytest.mark.django_db


@pytest.fixture
def prod(team):
    now = timezone.now()
    env = Environment.objects.create(team=team, name="prod", first_seen=now, last_seen=now)
    Service.objects.create(environment=env, kind="service", name="checkout",
                           first_seen=now, last_seen=now)
    return env


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [s["name"] for s in response.json()["results"]]


def test_services_by_environment_name_or_id(api, team, prod):
    client = api(team, "read")
    assert names(client.get("/api/v1/environments/prod/services")) == ["checkout"]
    assert names(client.get(f"/api/v1/environments/{prod.pk}/services")) == ["checkout"]
    assert client.get("/api/v1/environments/staging/services").status_code == 404


def test_another_teams_environment_is_a_404_by_name_and_by_id(api, other_team, prod):
    intruder = api(other_team, "read")
    assert intruder.get("/api/v1/environments/prod/services").status_code == 404
    assert intruder.get(f"/api/v1/environments/{prod.pk}/services").status_code == 404
