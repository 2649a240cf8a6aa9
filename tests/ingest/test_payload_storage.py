"""How raw payloads are stored: TOAST compresses them with lz4 where the server has it."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_raw_payloads_are_compressed_with_lz4():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                       "WHERE name = 'default_toast_compression'")
        if not cursor.fetchone()[0]:
            pytest.skip("this PostgreSQL is built without lz4")
        cursor.execute("SELECT attcompression FROM pg_attribute "
                       "WHERE attrelid = 'ingest_ingestpayload'::regclass AND attname = 'data'")
        assert cursor.fetchone()[0] == "l"


@pytest.mark.parametrize("size", [0, 999, 1000, 1001, 10_007])
def test_a_payload_larger_than_a_piece_is_read_back_whole(team, monkeypatch, size):
    """A large payload is read in pieces (libpq would hold one piece of 136 MB three times);
    every size around the piece's edge comes back byte for byte."""
    import os

    from ingest import services
    from trustrank.accounts.models import Scope
    from trustrank.accounts.principal import Principal

    monkeypatch.setattr(services, "_PAYLOAD_PIECE", 1000)
    payload = os.urandom(size)
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    job = services.job_create(team=team, kind="traces", payload=payload, principal=principal,
                              params={"encoding": "protobuf"})
    assert services._payload_load(job_id=job.pk) == payload
