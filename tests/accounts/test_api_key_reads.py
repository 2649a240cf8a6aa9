"""API keys on the API's reads and writes are looked up on every request: a key revoked in
another process is refused at once (only the telemetry receivers trust a key found good for
TRUSTRANK_API_KEY_CACHE_SECONDS)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from trustrank.accounts.models import ApiKey, Team

pytestmark = pytest.mark.django_db


def test_a_key_revoked_elsewhere_is_refused_on_the_next_read(team: Team, make_key, settings) -> None:
    settings.TRUSTRANK_API_KEY_CACHE_SECONDS = 3600
    secret = make_key(team, "read", "triage")
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=secret)
    assert client.get("/api/v1/findings").status_code == 200
    # Revoked by another process: this one remembers nothing about the key.
    ApiKey.objects.filter(team=team).update(revoked_at=timezone.now())
    assert client.get("/api/v1/findings").status_code == 401
    refused = client.post("/api/v1/findings/999999/triage", {"reason": "x"}, format="json")
    assert refused.status_code == 401


def test_a_read_with_an_unknown_key_is_refused(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_X_API_KEY="tr_nope_nope")
    assert client.get("/api/v1/findings").status_code == 401
