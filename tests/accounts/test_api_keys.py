"""Team API keys: issued once, stored hashed, scoped, revocable, last use recorded."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import CommandError, call_command

from trustrank.accounts.models import ApiKey, Team
from trustrank.accounts.services import (
    InvalidScope,
    api_key_authenticate,
    api_key_issue,
    api_key_revoke,
)

pytestmark = pytest.mark.django_db


def test_issue_api_key_command_prints_the_key_alone_on_its_last_line():
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "issue_api_key",
        "--team",
        "ci",
        "--scope",
        "sbom:write",
        "--scope",
        "read",
        stdout=out,
        stderr=err,
    )
    secret = out.getvalue().strip().splitlines()[-1]
    assert secret.startswith("tr_")
    assert Team.objects.filter(name="ci").exists()
    key = ApiKey.objects.get()
    assert key.scopes == ["read", "sbom:write"]
    assert secret not in (key.digest, key.prefix)
    assert key.digest == hashlib.sha256(secret.encode()).hexdigest()
    assert api_key_authenticate(secret=secret) == key


def test_issue_api_key_refuses_unknown_scopes():
    with pytest.raises(CommandError):
        call_command("issue_api_key", "--team", "ci", "--scope", "root")
    with pytest.raises(InvalidScope):
        api_key_issue(team=Team.objects.create(name="t"), name="k", scopes=["everything"])


def test_revoked_key_no_longer_authenticates(team):
    issued = api_key_issue(team=team, name="k", scopes=["read"])
    api_key_revoke(api_key=issued.api_key)
    assert api_key_authenticate(secret=issued.secret) is None


def test_last_use_is_recorded(team, api):
    client = api(team, "read")
    assert ApiKey.objects.get().last_used_at is None
    client.get("/api/v1/projects")
    assert ApiKey.objects.get().last_used_at is not None


def test_bearer_header_works_like_x_api_key(team, client):
    secret = api_key_issue(team=team, name="k", scopes=["read"]).secret
    assert client.get("/api/v1/projects", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    assert (
        client.get("/api/v1/projects", HTTP_AUTHORIZATION="Bearer tr_nope_nope").status_code == 401
    )


def test_roles_map_to_scopes(team, make_user, client):
    client.force_login(make_user("v", team=team, role="viewer"))
    response = client.post(
        "/api/v1/sboms?projectName=a&autoCreate=true", data=b"{}", content_type="application/json"
    )
    assert response.status_code == 403
    assert "sbom:write" in response.json()["detail"]


def test_team_admin_issues_and_revokes_a_key_in_the_browser(team, other_team, make_user, client):
    client.force_login(make_user("admin", team=team))
    page = client.post(
        "/settings/keys/", {"team": team.pk, "name": "jenkins", "scopes": ["sbom:write", "read"]}
    ).content.decode()
    key = ApiKey.objects.get(name="jenkins")
    secret = page.split('<p class="mono">')[1].split("</p>")[0].strip()
    assert api_key_authenticate(secret=secret) == key
    # Shown once: the list never repeats it.
    assert secret not in client.get("/settings/keys/").content.decode()
    client.post(f"/settings/keys/{key.pk}/revoke/")
    assert api_key_authenticate(secret=secret) is None


def test_keys_of_other_teams_and_non_admins_are_out_of_reach(team, other_team, make_user, client):
    foreign = api_key_issue(team=other_team, name="theirs", scopes=["read"])
    client.force_login(make_user("viewer", team=team, role="viewer"))
    assert "theirs" not in client.get("/settings/keys/").content.decode()
    assert client.post(f"/settings/keys/{foreign.api_key.pk}/revoke/").status_code == 404
    refused = client.post("/settings/keys/", {"team": other_team.pk, "name": "x", "scopes": ["read"]})
    assert refused.status_code == 200
    assert not ApiKey.objects.filter(name="x").exists()
    assert api_key_authenticate(secret=foreign.secret) is not None
