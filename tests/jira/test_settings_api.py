"""GET/PUT/DELETE /api/v1/jira: admins only, each bad value a 400 naming its field with
nothing stored, and the token accepted but never answered."""

from __future__ import annotations

import pytest

from trustrank.findings.records import AuditEvent
from trustrank.jira.models import JiraConfig

pytestmark = pytest.mark.django_db

VALID = {
    "base_url": "https://example.atlassian.net/",
    "project_key": "SEC",
    "user": "bot@example.com",
    "token": "tok-very-secret",
    "priorities": {"immediate": "Highest", "out-of-cycle": "High"},
}


@pytest.fixture
def public_dns(monkeypatch):
    """example.atlassian.net resolves to a public address without asking a DNS server."""
    import socket

    real = socket.getaddrinfo

    def fake(host, *args, **kwargs):
        if host.endswith(".atlassian.net"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 443))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_an_admin_sets_the_settings_and_never_reads_the_token_back(team, api, public_dns):
    client = api(team, "admin")
    assert client.get("/api/v1/jira").json() == {
        "team": team.pk, "configured": False, "base_url": "", "project_key": "",
        "issue_type": "Bug", "user": "", "auth": None, "token_set": False, "priorities": {},
    }

    response = client.put("/api/v1/jira", VALID, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["base_url"] == "https://example.atlassian.net"  # no trailing slash
    assert body["project_key"] == "SEC" and body["issue_type"] == "Bug"
    assert body["auth"] == "basic" and body["token_set"] is True
    assert body["priorities"] == {"immediate": "Highest", "out-of-cycle": "High"}
    assert "token" not in body
    assert b"tok-very-secret" not in response.content
    got = client.get("/api/v1/jira")
    assert got.json() == body and b"tok-very-secret" not in got.content
    assert JiraConfig.objects.get(team=team).token == "tok-very-secret"
    event = AuditEvent.objects.get(team=team, action="jira_config_set")
    assert "tok-very-secret" not in str(event.after) and event.after["token_set"] is True


def test_a_later_put_without_a_token_keeps_it(team, api, public_dns):
    client = api(team, "admin")
    client.put("/api/v1/jira", VALID, format="json")
    response = client.put("/api/v1/jira", {"project_key": "OPS", "user": ""}, format="json")
    assert response.status_code == 200
    assert response.json()["auth"] == "bearer" and response.json()["project_key"] == "OPS"
    assert JiraConfig.objects.get(team=team).token == "tok-very-secret"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base_url": "ftp://jira.example.com"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"base_url": "http://127.0.0.1:8080"}, "base_url"),
        ({"base_url": "http://10.1.2.3/jira"}, "base_url"),
        ({"base_url": ""}, "base_url"),
        ({"project_key": "sec"}, "project_key"),
        ({"project_key": "SEC-1"}, "project_key"),
        ({"project_key": None}, "project_key"),
        ({"token": None}, "token"),
        ({"priorities": {"urgent": "High"}}, "priorities"),
        ({"priorities": ["Highest"]}, "priorities"),
        ({"issue_type": 3}, "issue_type"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field_and_stores_nothing(
    team, api, public_dns, change, field
):
    body = {**VALID, **change}
    response = api(team, "admin").put("/api/v1/jira", body, format="json")
    assert response.status_code == 400, response.content
    problem = response.json()
    assert response["Content-Type"] == "application/problem+json"
    assert problem["param"] == field and field in problem["errors"]
    assert problem["detail"].startswith(field)
    assert not JiraConfig.objects.exists()
    assert not AuditEvent.objects.filter(action="jira_config_set").exists()


def test_a_private_jira_is_accepted_when_allowed(team, api, settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    response = api(team, "admin").put(
        "/api/v1/jira", {**VALID, "base_url": "http://10.1.2.3/jira"}, format="json"
    )
    assert response.status_code == 200 and response.json()["base_url"] == "http://10.1.2.3/jira"


@pytest.mark.parametrize("scope", ["read", "triage", "audit:read"])
def test_without_the_admin_scope_the_settings_are_refused(team, api, public_dns, scope):
    client = api(team, scope)
    assert client.get("/api/v1/jira").status_code == 403
    assert client.put("/api/v1/jira", VALID, format="json").status_code == 403
    assert client.delete("/api/v1/jira").status_code == 403
    assert not JiraConfig.objects.exists()


def test_anonymous_is_refused(client):
    assert client.get("/api/v1/jira").status_code == 401


def test_a_key_cannot_reach_another_teams_settings(team, other_team, api, public_dns):
    JiraConfig.objects.create(team=other_team, base_url="https://x.atlassian.net",
                              project_key="THEIRS", token="their-token")
    client = api(team, "admin")
    body = client.get("/api/v1/jira").json()
    assert body["team"] == team.pk and body["configured"] is False
    client.put("/api/v1/jira?team=intruders", VALID, format="json")
    assert JiraConfig.objects.get(team=other_team).project_key == "THEIRS"


def test_a_user_admin_of_two_teams_names_one(team, other_team, make_user, client, public_dns):
    from trustrank.accounts.services import membership_set

    user = make_user("alice", team=team)
    membership_set(team=other_team, user=user, role="viewer")
    client.login(username="alice", password="pw-alice")
    # Admin of one team only: that one is chosen.
    assert client.get("/api/v1/jira").json()["team"] == team.pk
    refused = client.put("/api/v1/jira?team=intruders", VALID, content_type="application/json")
    assert refused.status_code == 403
    assert not JiraConfig.objects.exists()


def test_delete_removes_the_settings(team, api, public_dns):
    client = api(team, "admin")
    client.put("/api/v1/jira", VALID, format="json")
    assert client.delete("/api/v1/jira").status_code == 204
    assert client.get("/api/v1/jira").json()["configured"] is False


def test_decisions_may_be_spelt_with_underscores_and_a_form_body_works(team, api, public_dns):
    client = api(team, "admin")
    client.put("/api/v1/jira", VALID, format="json")
    response = client.put("/api/v1/jira", {"priorities": {"OUT_OF_CYCLE": "High"}},
                          format="json")
    assert response.json()["priorities"] == {"out-of-cycle": "High"}
    form = client.put("/api/v1/jira", "project_key=OPS&issue_type=Task",
                      content_type="application/x-www-form-urlencoded")
    assert form.status_code == 200, form.content
    assert (form.json()["project_key"], form.json()["issue_type"]) == ("OPS", "Task")
