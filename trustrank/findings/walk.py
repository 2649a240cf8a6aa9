"""The first page of the ranked part of a list in the contextual order, when its filter is
broad: a walk of the team's rank order that stops after a bound, then the matches sorted.

PostgreSQL pages `ORDER BY rank` under a filter by walking the team's rank index and testing
each finding's row, expecting the matches spread evenly along the order. At 10,000,000
findings a purl prefix of a few packages (220,000 matches) sits in a few stretches of the
order, and the walk passed millions of rows before its first page (up to 40 s). Sorting every
match by its rank instead (a probe each, then a top-N sort: ~2 s for 220,000) made the mix
worse: most broad searches (CVE-id fragments, package substrings of a hundred packages) have
matches spread along the order, and the walk finds their page within a few thousand rows.
What decides is where the matches sit, which only the walk tells. So:

1. `bounded_walk`: the team's first WALK_ROWS ranked findings in rank order (a LIMIT on the
   rank index, in a subquery PostgreSQL cannot flatten), each tested against the filter (an
   `EXISTS` fenced with `OFFSET 0`, so it stays a probe of that finding by primary key, not a
   join that reads every match). It stops at the page's last match, as the walk does, and
   never reads past WALK_ROWS.
2. Only when it comes back short of the page: `sorted_matches`, the filter's matches first
   (from the search indexes), each one's rank by key, the page by a top-N sort; at most
   SORT_MATCHES_MAX of them are read, beyond that the unbounded walk is the cheaper one and
   the caller walks.

Both answer the same ids in the same order as the walk (rank, then id descending).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from trustrank.findings.models import Finding

# How many of the team's ranked findings the bounded walk tests (see the module's docstring).
WALK_ROWS = 10_000
# The bounded walk answers pages that end within this many matches (the first pages); a
# deeper slice (the kept order head) walks as before.
WALK_STOP_MAX = 1000
# The most matches a short walk's fallback sorts; more and it walks the order instead.
SORT_MATCHES_MAX = 250_000


def _ranks() -> Any:
    """The ranks' manager (trustrank.ranking's RankedFinding, through Finding.ranked: the
    findings app does not import the ranking app)."""
    model = Finding._meta.get_field("ranked").related_model
    assert model is not None and not isinstance(model, str)
    return model._default_manager


def _rows(sql: str, params: Any) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()]


def bounded_walk(
    base: QuerySet[Finding], *, team_ids: Iterable[int], stop: int, rows: int | None = None
) -> tuple[list[int], bool]:
    """(ids, complete): the first `stop` ids of `base`'s ranked findings in rank order
    (then id descending) among the teams' first `rows` ranked findings (WALK_ROWS by default,
    0 for all of them). `complete` is true when those ids are the answer: `stop` of them
    were found, or the teams hold no more than `rows` ranked findings."""
    teams = list(team_ids)
    rows = WALK_ROWS if rows is None else rows
    ranks = _ranks().filter(team_id__in=teams)
    walk = ranks.order_by("rank", "-finding_id").values_list("finding_id", "rank")
    walk_sql, walk_params = (walk[:rows] if rows else walk).query.sql_with_params()
    try:
        test_sql, test_params = (
            base.order_by().filter(pk=RawSQL('"walk"."finding_id"', ()))
            .values("pk").query.sql_with_params()
        )
    except EmptyResultSet:
        return [], True
    # Django's own SQL and integers; the values stay parameters. The test of each finding is
    # a correlated subquery (`OFFSET 0` keeps PostgreSQL from making it a join), so the walk
    # runs in one process: a parallel walk of the rank index, merged in order, read 1,000,000
    # rows to find 51 matches that sat within the first 3,200 (5 s at 10M).
    sql = (
        f'SELECT "walk"."finding_id" FROM ({walk_sql}) AS "walk" ("finding_id", "rank") '  # noqa: S608
        f"WHERE EXISTS ({test_sql} OFFSET 0) "
        f'ORDER BY "walk"."rank" ASC, "walk"."finding_id" DESC LIMIT {int(stop)}'
    )
    ids = [row[0] for row in _rows(sql, (*walk_params, *test_params))]
    return ids, len(ids) >= stop or not rows or ranks[: rows + 1].count() <= rows


def sorted_matches(
    base: QuerySet[Finding], *, team_ids: Iterable[int], start: int, stop: int,
    most: int | None = None,
) -> list[int] | None:
    """Ids [start:stop] of `base`'s ranked findings in rank order (then id descending),
    sorted from the matches; None when `base` matches more than `most` findings."""
    most = SORT_MATCHES_MAX if most is None else most
    rank = Subquery(
        _ranks().filter(finding_id=OuterRef("pk"), team_id__in=list(team_ids))
        .values("rank")[:1]
    )
    try:
        inner, params = (
            base.order_by().annotate(walk_rank=rank).values_list("pk", "walk_rank")
            .query.sql_with_params()
        )
    except EmptyResultSet:
        return []
    # The matches first (at most `most` + 1 read), their ranks by key, a top-N sort; the
    # window counts every match read, ranked or not (the unranked sort last).
    sql = (
        f"SELECT id, rank, count(*) OVER () FROM ({inner} LIMIT {int(most) + 1}) "  # noqa: S608
        f"AS matches (id, rank) ORDER BY rank ASC NULLS LAST, id DESC LIMIT {int(stop)}"
    )
    found = _rows(sql, params)
    if found and found[0][2] > most:
        return None
    return [row[0] for row in found if row[1] is not None][start:stop]
