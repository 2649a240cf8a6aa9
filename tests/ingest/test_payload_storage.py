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
