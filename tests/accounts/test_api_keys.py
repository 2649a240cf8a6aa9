"""Team API keys: issued once, stored hashed, scoped, revocable, last use recorded."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT
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


def _revoke_elsewhere(key: ApiKey) -> None:
    """As another process revokes a key: a row update this process does not see."""
    from django.utils import timezone

    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())


def test_cached_key_revoked_elsewhere_stops_authenticating_within_the_cache_time(
    team, settings, monkeypatch
):
    from trustrank.accounts import services

    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 5
    now = [1000.0]
    monkeypatch.setattr(services, "_clock", lambda: now[0])
    issued = api_key_issue(team=team, name="collector", scopes=["metrics:write"])
    assert services.api_key_authenticate_cached(secret=issued.secret) == issued.api_key
    _revoke_elsewhere(issued.api_key)
    now[0] += 4.9
    assert services.api_key_authenticate_cached(secret=issued.secret) == issued.api_key
    now[0] += 0.2
    assert services.api_key_authenticate_cached(secret=issued.secret) is None
    assert services.api_key_authenticate_cached(secret=issued.secret) is None


def test_cached_key_revoked_by_this_process_stops_at_once(team, settings):
    from trustrank.accounts.services import api_key_authenticate_cached

    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 3600
    issued = api_key_issue(team=team, name="collector", scopes=["metrics:write"])
    assert api_key_authenticate_cached(secret=issued.secret) == issued.api_key
    api_key_revoke(api_key=issued.api_key)
    assert api_key_authenticate_cached(secret=issued.secret) is None


def test_cached_authentication_saves_the_query_and_zero_turns_it_off(
    team, settings, django_assert_num_queries
):
    from trustrank.accounts.services import api_key_authenticate_cached

    issued = api_key_issue(team=team, name="collector", scopes=["metrics:write"])
    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 5
    api_key_authenticate_cached(secret=issued.secret)
    with django_assert_num_queries(0):
        assert api_key_authenticate_cached(secret=issued.secret) == issued.api_key
    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 0
    _revoke_elsewhere(issued.api_key)
    assert api_key_authenticate_cached(secret=issued.secret) is None


def test_a_refused_secret_is_not_remembered(team, settings):
    from trustrank.accounts.services import api_key_authenticate_cached

    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 3600
    issued = api_key_issue(team=team, name="collector", scopes=["metrics:write"])
    assert api_key_authenticate_cached(secret=issued.secret + "x") is None
    assert api_key_authenticate_cached(secret=issued.secret) == issued.api_key


def _setting(name: str, **env: str) -> subprocess.CompletedProcess[str]:
    code = f"import django; django.setup(); from django.conf import settings; print(settings.{name})"
    full = {k: v for k, v in os.environ.items() if k != "TRUSTRANK_API_KEY_CACHE_SECONDS"}
    full.update(DJANGO_SETTINGS_MODULE="trustrank.settings", SECRET_KEY="x" * 50, **env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60, check=False)


def test_api_key_cache_seconds_is_read_from_the_environment():
    assert _setting("TRUSTRANK_API_KEY_CACHE_SECONDS").stdout.strip() == "5.0"
    chosen = _setting("TRUSTRANK_API_KEY_CACHE_SECONDS", TRUSTRANK_API_KEY_CACHE_SECONDS="0.5")
    assert chosen.stdout.strip() == "0.5"
    bad = _setting("TRUSTRANK_API_KEY_CACHE_SECONDS", TRUSTRANK_API_KEY_CACHE_SECONDS="soon")
    assert bad.returncode != 0
    assert "TRUSTRANK_API_KEY_CACHE_SECONDS='soon' is not a number" in bad.stderr
