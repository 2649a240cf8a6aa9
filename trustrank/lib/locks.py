"""PostgreSQL advisory locks, the one way TrustRank serialises writers (STYLE.md: a row claim
or `pg_advisory_xact_lock`, never a look at live workers)."""

from __future__ import annotations

from django.db import connection


def advisory_xact_lock(key: int | str, key2: int | None = None) -> None:
    """Wait for the lock until the current transaction ends (commit or rollback).

    `key` is a bigint, or with `key2` the (int, int) form (a namespace and an id), or a text
    name hashed to a bigint by PostgreSQL (hashtextextended) for locks named by their data.
    Outside a transaction the lock would be released at once: call it inside `atomic()`.
    """
    with connection.cursor() as cursor:
        if isinstance(key, str):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
        elif key2 is not None:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [key, key2])
        else:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
