"""The findings list's totals: exact where counting is cheap, estimated where it is not, and
counted by one web worker at a time.

- Kept: a filter's total is kept under the teams' findings generation (`generation.py`): the
  next request with the same filter reads it from the cache shared by the web workers.
- Once: the generation moves with every write and ranking run, and then every worker misses
  the same total at once; `lib.single_flight` lets one of them count while the others wait
  for its answer (`TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS`), then fall back.
- Estimated: an exact `COUNT(*)` costs what the list holds (2.6 s for ten million findings),
  which no page of 50 should wait for. A list of more than `TRUSTRANK_FINDINGS_EXACT_COUNT_MAX`
  findings gets the planner's estimate instead (`Total.exact` false: the API's `count_exact`,
  "about N" on the page). Whether a list is that large is told by counting at most that many
  plus one of its rows: a count stopped early costs what it reads, and a large, dense list
  reaches the limit soon (the planner's guess alone could call a small list large when its
  filters are correlated).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import QuerySet

from trustrank.findings.generation import findings_generation
from trustrank.lib.single_flight import cache_get_or_compute_once


@dataclass(frozen=True)
class Total:
    """A list's total: `n` findings, exactly or (exact false) as estimated."""

    n: int
    exact: bool


def _key(qs: QuerySet[Any], *, team_ids: Iterable[int], what: Any) -> str:
    sql, params = qs.order_by().query.sql_with_params()
    digest = hashlib.sha256(repr((sql, params, what)).encode()).hexdigest()[:32]
    return f"findings-count:{findings_generation(team_ids=team_ids)}:{digest}"


def cached_count(qs: QuerySet[Any], *, team_ids: Iterable[int], cap: int | None = None) -> int:
    """`qs.count()` (at most cap + 1 when capped), kept under the teams' generation and
    counted once at a time: a request that finds another counting waits for its answer (and
    counts itself if that takes longer than the wait)."""
    try:
        key = _key(qs, team_ids=list(team_ids), what=cap)
    except EmptyResultSet:  # qs.none(), or a filter that can match nothing
        return 0

    def count() -> int:
        return qs.order_by().count() if cap is None else qs.order_by()[: cap + 1].count()

    return int(cache_get_or_compute_once(
        key, count, timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
        wait=settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS,
    ))


def planner_rows(qs: QuerySet[Any]) -> int:
    """How many rows PostgreSQL's planner expects `qs` to match (from its statistics, which
    follow the table's size between ANALYZEs): a planning, no scan."""
    sql, params = qs.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def about(n: int) -> int:
    """An estimate to three significant digits: it does not pretend to more."""
    if n < 1000:
        return n
    scale = 10 ** (len(str(n)) - 3)
    return round(n / scale) * scale


def list_total(qs: QuerySet[Any], *, team_ids: Iterable[int]) -> Total:
    """The list's total: exact up to TRUSTRANK_FINDINGS_EXACT_COUNT_MAX findings, estimated
    beyond; kept under the teams' generation and computed once at a time. A request that
    finds another computing it waits for it, then answers the planner's estimate."""
    limit = settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX
    try:
        key = _key(qs, team_ids=list(team_ids), what=("total", limit))
    except EmptyResultSet:
        return Total(0, exact=True)

    def compute() -> tuple[int, bool]:
        n = qs.order_by()[: limit + 1].count()
        if n <= limit:
            return n, True
        return about(max(planner_rows(qs), n)), False

    n, exact = cache_get_or_compute_once(
        key, compute, timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
        wait=settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS,
        fallback=lambda: (about(planner_rows(qs)), False),
    )
    return Total(int(n), exact=bool(exact))
