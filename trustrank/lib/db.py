"""Bulk writes through psycopg where the ORM is too slow for the volume."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
