"""PostgreSQL advisory locks, the one way TrustRank serialises writers (STYLE.md: a row claim
or `pg_advisory_xact_lock`, never a look at live workers)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from django.db import DatabaseError, connection, transaction


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
    taken = _lock_try(name)
    try:
        yield taken
    finally:
        if taken:
            _unlock(name)


def _lock_try(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        return bool(cursor.fetchone()[0])


def _unlock(name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])


@contextlib.contextmanager
def advisory_lock_wait(name: str, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the session-level lock `name` for the block, waiting for it as long as another
    session holds it (`on_wait` is called first, to say so): work that must run after, not
    beside, another of its kind, over more than one transaction. The wait is one statement
    without the session's lock and statement timeouts (a job's would end it: the holder may
    run for minutes). A dead holder's lock goes with its connection."""
    if not _lock_try(name):
        if on_wait is not None:
            on_wait()
        # SET LOCAL ends with this transaction; the session-level lock outlives it.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = 0")
            cursor.execute("SET LOCAL statement_timeout = 0")
            cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
    try:
        yield
    finally:
        # A connection that broke took the lock with it.
        with contextlib.suppress(DatabaseError):
            _unlock(name)
