"""Bulk reads and writes through psycopg where the ORM is too slow for the volume."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection
from psycopg import sql


def copy_rows(*, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """COPY `rows` into `table` (text format) and return how many were sent.

    COPY is several times faster than INSERT for thousands of rows. psycopg escapes and
    formats each row itself (`write_row`, in C with the binary package), so no COPY text is
    ever built by hand here. Runs in the caller's transaction.
    """
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    )
    count = 0
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


@contextmanager
def binary_rows(statement: str, params: Sequence[Any]) -> Iterator[Any]:
    """A server-side cursor (Django's `chunked_cursor`) that has executed `statement` with
    `params`, its rows fetched in PostgreSQL's binary format: numbers, dates and booleans
    are then copied rather than parsed from text (a few per cent of the findings read of
    a million, a tenth of the stored queue's: docs/ranking.md, "Rows read in binary"),
    into the same Python objects (`int`, `float`, `Decimal`, `date`,
    `bool`, `str`). The driver's errors are Django's, as through the cursor's own
    `execute` (Django's cursors bind parameters on the client, which PostgreSQL answers
    in text only, so the statement goes to psycopg's server cursor itself)."""
    with connection.chunked_cursor() as cur, connection.wrap_database_errors:
        cur.cursor.execute(statement, params, binary=True)
        yield cur
