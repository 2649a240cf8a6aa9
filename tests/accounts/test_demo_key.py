"""`python3 dev.py demo` keeps its API key across restarts, with the scopes the README names."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

import dev
from trustrank.accounts.models import ApiKey
from trustrank.accounts.services import api_key_authenticate, api_key_revoke

pytestmark = pytest.mark.django_db

README = Path(dev.ROOT / "README.md").read_text()


@pytest.fixture
def var_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTRANK_VAR_DIR", str(tmp_path))
    return tmp_path


def _readme_scopes() -> set[str]:
    # "a `demo` team API key (scopes `sbom:write`, ..., `admin` and the site-wide `feeds:write`;"
    sentence = re.search(r"team API key\s+\(scopes (.*?);", README, re.S)
    assert sentence, "the README no longer describes the demo key's scopes"
    return set(re.findall(r"`([a-z:]+)`", sentence.group(1)))


def test_demo_key_has_triage_and_the_scopes_the_readme_names(var_dir):
    _, secret = dev.demo_accounts()
    key = api_key_authenticate(secret=secret)
    assert key is not None and key.team.name == dev.DEMO_TEAM
    assert "triage" in key.scopes
    assert _readme_scopes() <= set(key.scopes), _readme_scopes() - set(key.scopes)


def test_demo_key_survives_a_restart(var_dir):
    _, first = dev.demo_accounts()
    key_file = var_dir / "demo_api_key"
    assert key_file.read_text().strip() == first
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    _, second = dev.demo_accounts()
    assert second == first
    assert api_key_authenticate(secret=first) is not None
    assert ApiKey.objects.filter(name=dev.DEMO_KEY_NAME, revoked_at__isnull=True).count() == 1


def test_a_revoked_demo_key_is_replaced(var_dir):
    _, first = dev.demo_accounts()
    old = api_key_authenticate(secret=first)
    api_key_revoke(api_key=old)
    _, second = dev.demo_accounts()
    assert second != first
    assert (var_dir / "demo_api_key").read_text().strip() == second
    assert api_key_authenticate(secret=second) is not None
