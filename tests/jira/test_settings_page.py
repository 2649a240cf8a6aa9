"""/settings/jira/: the team admin's form (linked from the API keys page); the token is
write-only there too."""

from __future__ import annotations

import pytest

from trustrank.jira.models import JiraConfig

pytestmark = pytest.mark.django_db


def _form(team, **values):
    p = f"t{team.pk}-"
    data = {"team": team.pk, p + "base_url": "http://10.0.0.5/jira", p + "project_key": "SEC",
            p + "issue_type": "Bug", p + "user": "", p + "token": "pat-secret",
            p + "priority_immediate": "Highest"}
    data.update({p + k: v for k, v in values.items()})
    return data


def test_an_admin_saves_the_settings_from_the_page(team, make_user, client, settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    keys_page = client.get("/settings/keys/").content.decode()
    assert 'href="/settings/jira/"' in keys_page

    response = client.post("/settings/jira/", _form(team))

    assert response.status_code == 302
    config = JiraConfig.objects.get(team=team)
    assert (config.project_key, config.token, config.user) == ("SEC", "pat-secret", "")
    assert config.priorities == {"immediate": "Highest"}
    page = client.get("/settings/jira/").content.decode()
    assert "configured" in page and "http://10.0.0.5/jira" in page
    assert "pat-secret" not in page
    # Saving again with the token left empty keeps it.
    client.post("/settings/jira/", _form(team, token="", project_key="OPS"))
    config.refresh_from_db()
    assert (config.project_key, config.token) == ("OPS", "pat-secret")


def test_a_bad_value_is_shown_on_its_field_and_nothing_is_stored(
    team, make_user, client, settings
):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    response = client.post("/settings/jira/", _form(team, base_url="http://127.0.0.1/"))
    assert response.status_code == 400
    assert "is a loopback address" in response.content.decode()
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    response = client.post("/settings/jira/", _form(team, project_key="lower"))
    assert response.status_code == 400 and "project key" in response.content.decode()
    assert not JiraConfig.objects.exists()


def test_a_viewer_gets_no_form_and_cannot_post(team, make_user, client):
    make_user("vera", team=team, role="viewer")
    client.login(username="vera", password="pw-vera")
    assert "Only team admins" in client.get("/settings/jira/").content.decode()
    assert client.post("/settings/jira/", _form(team)).status_code == 404
    assert not JiraConfig.objects.exists()
