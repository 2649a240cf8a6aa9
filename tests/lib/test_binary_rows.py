"""Rows read in PostgreSQL's binary format (`lib.db.binary_rows`, the findings read and the
stored queue's comparison at ten million rows) must be the values, of the same Python
types, that Django's own cursor reads in text; and the driver's errors are Django's."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal

import pytest
from django.db import connection, transaction, utils

from bench.rerank import build
from trustrank.lib.db import binary_rows
from trustrank.ranking.inputs import findings as findings_module

pytestmark = pytest.mark.django_db

_EVERY_KIND = """
SELECT 9007199254740993::bigint, 7::integer, 3::smallint, 0.1::float8, -0.0::float8,
       'NaN'::float8, 1e-7::float8, 12.3400::numeric, DATE '2024-02-29',
       TIMESTAMPTZ '2024-02-29 12:34:56.789+00', true, 'défaut \\ tab	end', '',
       NULL, NULL::text, NULL::date, NULL::float8, %s::text
"""


@contextmanager
def _text_rows(statement: str, params: list[object]):
    with connection.chunked_cursor() as cur:
        cur.execute(statement, params)
        yield cur


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and a != a:  # NaN
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b and str(a) == str(b)


def test_every_kind_of_value_reads_as_in_text():
    with _text_rows(_EVERY_KIND, ["ünïcode"]) as cur:
        (text,) = cur.fetchall()
    with binary_rows(_EVERY_KIND, ["ünïcode"]) as cur:
        (binary,) = cur.fetchmany(10)
    assert len(text) == len(binary) == 18
    assert all(_same(a, b) for a, b in zip(text, binary, strict=True)), (text, binary)
    assert isinstance(binary[7], Decimal) and isinstance(binary[8], date)
    assert isinstance(binary[9], datetime) and binary[13] is None


def test_a_bad_statement_raises_djangos_error():
    with (pytest.raises(utils.ProgrammingError, match="no_such_column"), transaction.atomic(),
          binary_rows("SELECT no_such_column FROM findings_finding", []) as cur):
        cur.fetchmany(1)
    with connection.cursor() as cur:  # the connection serves on past the savepoint
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)


def test_the_findings_read_in_binary_gives_the_records_of_a_text_read(monkeypatch):
    """Every record, id and settled decision of the full findings read, and each field's
    type (a float read as a Decimal would change the inputs digest)."""
    from tests.ranking.test_incremental_store import _run, full_read
    from trustrank.findings.services.due_dates import triage_policy_for
    from trustrank.ranking.services import runs

    team_id = build(findings=400, services=30, edges=90, versions=12, seed=31)
    runs._PREVIOUS.clear()
    _run(team_id)  # due dates: the settled decisions are read too
    with connection.cursor() as cur:
        cur.execute("UPDATE findings_finding SET kev_date_added = DATE '2022-01-10', "
                    "in_kev = true WHERE id IN (SELECT id FROM findings_finding "
                    "WHERE team_id = %s ORDER BY id LIMIT 5)", [team_id])
    policy = triage_policy_for(team_id=team_id)
    binary = full_read(team_id, policy)
    monkeypatch.setattr(findings_module, "binary_rows", _text_rows)
    text = full_read(team_id, policy)
    assert binary == text
    assert len(binary[0]) == 400 and len(binary[3]) == 400
    for a, b in zip(binary[0], text[0], strict=True):
        assert list(map(type, a.__getstate__())) == list(map(type, b.__getstate__()))
    assert any(f.kev_date == date(2022, 1, 10) for f in binary[0])
