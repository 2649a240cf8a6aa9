"""The product's database sessions run without JIT (trustrank/settings): PostgreSQL compiled
any statement estimated above `jit_above_cost`, and at ten million findings the count of a
page's ranks (a few milliseconds of work) was estimated there and compiled for 76 ms a
request."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_sessions_run_without_jit():
    with connection.cursor() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone()[0] == "off"


def test_a_statement_over_the_jit_threshold_is_not_compiled():
    with connection.cursor() as cur:
        cur.execute("SET LOCAL jit_above_cost = 0")
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(g) FROM generate_series(1, 1000) g")
        plan = cur.fetchone()[0]
    assert "JIT" not in plan[0]
