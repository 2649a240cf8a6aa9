"""PostgreSQL advisory locks, the one way TrustRank serialises writers (STYLE.md: a row claim
or `pg_advisory_xact_lock`, never a look at live workers)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


@contextlib.contextmanager
def advisory_lock_try(name: str) -> Iterator[bool]:
    """Take the session-level lock `name` if no one holds it; yield whether it was taken,
    and release it afterwards. For work that must not run twice at once but cannot sit in
    one transaction (it sends messages as it goes, which must follow its commits). A dead
    holder's lock goes with its connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
