"""API keys on reads: a key found good is trusted for TRUSTRANK_API_KEY_CACHE_SECONDS without
a query (one team's scripts read the findings list many times a second); a write checks the
key every time."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from trustrank.accounts.models import ApiKey, Team

pytestmark = pytest.mark.django_db


def test_a_read_reuses_a_key_found_good_and_a_write_checks_it_again(team: Team, make_key) -> None:
    secret = make_key(team, "read", "triage")
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=secret)
    assert client.get("/api/v1/findings").status_code == 200
    # Revoked by another process: this one's remembered key is not told.
    ApiKey.objects.filter(team=team).update(revoked_at=timezone.now())
    assert client.get("/api/v1/findings").status_code == 200
    refused = client.post("/api/v1/findings/999999/triage", {"reason": "x"}, format="json")
    assert refused.status_code == 401
    with override_settings(TRUSTRANK_API_KEY_CACHE_SECONDS=0):
        assert client.get("/api/v1/findings").status_code == 401


def test_a_read_with_an_unknown_key_is_refused(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_X_API_KEY="tr_nope_nope")
    assert client.get("/api/v1/findings").status_code == 401
