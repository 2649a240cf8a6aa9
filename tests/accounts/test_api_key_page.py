"""The API-key page starts from sensible choices: the admin's only team, the read scope."""

from __future__ import annotations

import re

import pytest

from trustrank.accounts.models import ApiKey

pytestmark = pytest.mark.django_db


def _team_options(html: str) -> list[str]:
    select = re.search(r'<select name="team"[^>]*>(.*?)</select>', html, re.S)
    assert select, html
    return re.findall(r"<option[^>]*>", select.group(1))


def test_an_admin_of_one_team_finds_it_preselected(team, make_user, client):
    client.force_login(make_user("admin", team=team))
    options = _team_options(client.get("/settings/keys/").content.decode())
    assert options == [f'<option value="{team.pk}" selected>']


def test_an_admin_of_two_teams_chooses_one(team, other_team, make_user, client):
    client.force_login(make_user("admin", team=team))
    from django.contrib.auth import get_user_model

    from trustrank.accounts.models import Role
    from trustrank.accounts.services import membership_set

    membership_set(team=other_team, user=get_user_model().objects.get(username="admin"),
                   role=Role.ADMIN)
    options = _team_options(client.get("/settings/keys/").content.decode())
    assert options[0] == '<option value="" selected>'
    assert len(options) == 3


def test_read_is_checked_and_the_legacy_scope_is_not_offered(team, make_user, client):
    client.force_login(make_user("admin", team=team))
    html = client.get("/settings/keys/").content.decode()
    checked = re.findall(r'<input type="checkbox" name="scopes" value="([^"]+)"[^>]*checked', html)
    assert checked == ["read"]
    assert 'value="triage"' in html and 'value="metrics:write"' in html
    assert 'value="telemetry:write"' not in html


def test_the_preselected_team_and_default_scope_issue_a_key(team, make_user, client):
    client.force_login(make_user("admin", team=team))
    page = client.post("/settings/keys/", {"team": team.pk, "name": "dash", "scopes": ["read"]})
    assert page.status_code == 200 and 'id="issued-key"' in page.content.decode()
    assert ApiKey.objects.get(name="dash").scopes == ["read"]
