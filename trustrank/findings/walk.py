"""The first page of the ranked part of a list in the contextual order: a walk of the team's
rank order in one process, bounded, and the matches sorted only when it comes back short.

At 10,000,000 findings the first page of a broad search (`pkg:maven/org.bench/pkg31`, 220,000
matches) took 20-50 s, though its 51st match sits 5,413 findings down the rank order (every
broad search of the bench's mix finds its page within the first 5,617). PostgreSQL planned the
walk in parallel: workers share out the rank index's pages and a Gather Merge puts their rows
back in order, so it waits on each worker for its next match, and every worker walked on
through stretches without one: 1,000,000 rows read, each finding's row probed, for a page
within the first 3,200 (`pkg5`, 5 s). Sorting every match by its rank instead (a probe each,
then a top-N sort, ~2 s for 220,000) made the bench's mix worse (docs/triage.md). So:

1. `bounded_walk`: the team's first WALK_ROWS ranked findings in rank order (a LIMIT on the
   rank index, in a subquery PostgreSQL does not flatten), each tested against the filter by
   an `EXISTS` fenced with `OFFSET 0`: a correlated subquery, a probe of that finding by
   primary key, which keeps the walk in one process and never becomes a join that reads every
   match. It stops at the page's last match and never reads past WALK_ROWS.
2. Only when it comes back short of the page: `sorted_matches`, the filter's matches first
   (from the search indexes), each one's rank by key, the page by a top-N sort. A search of
   more than 25,000 matches (a broad one) is sorted in the time the walk takes for ~10,000
   rows (~8 µs a match against ~18 µs a walked row), hence WALK_ROWS.
3. More than SORT_MATCHES_MAX matches: the same walk, unbounded.

All three answer the same ids in the same order as the walk (rank, then id descending).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.expressions import RawSQL

from trustrank.findings.models import Finding

# How many of the team's ranked findings the bounded walk tests (the module's docstring).
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


def _direction(descending: bool) -> str:
    return "DESC" if descending else "ASC"


def bounded_walk(
    base: QuerySet[Finding], *, team_id: int, stop: int, rows: int | None = None,
    descending: bool = False,
) -> tuple[list[int], bool]:
    """(ids, complete): the first `stop` ids of `base`'s findings ranked in team `team_id`,
    in its queue order ((qkey, finding id); `descending`: the reverse), among the team's
    first `rows` ranked findings (WALK_ROWS by default, 0 for all of them). `complete` is
    true when those ids are the answer: `stop` of them were found, or the team holds no more
    than `rows` ranked findings."""
    rows = WALK_ROWS if rows is None else rows
    ranks = _ranks().filter(team_id=team_id)
    order = ("-qkey", "-finding_id") if descending else ("qkey", "finding_id")
    walk = ranks.order_by(*order).values_list("finding_id", "qkey")
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
    way = _direction(descending)
    sql = (
        f'SELECT "walk"."finding_id" FROM ({walk_sql}) AS "walk" ("finding_id", "qkey") '  # noqa: S608
        f"WHERE EXISTS ({test_sql} OFFSET 0) "
        f'ORDER BY "walk"."qkey" {way}, "walk"."finding_id" {way} LIMIT {int(stop)}'
    )
    ids = [row[0] for row in _rows(sql, (*walk_params, *test_params))]
    return ids, len(ids) >= stop or not rows or ranks[: rows + 1].count() <= rows


def sorted_matches(
    base: QuerySet[Finding], *, team_id: int, start: int, stop: int,
    most: int | None = None, descending: bool = False,
) -> list[int] | None:
    """Ids [start:stop] of `base`'s findings ranked in team `team_id`, in its queue order,
    sorted from the matches; None when `base` matches more than `most` findings."""
    most = SORT_MATCHES_MAX if most is None else most
    key = Subquery(
        _ranks().filter(finding_id=OuterRef("pk"), team_id=team_id).values("qkey")[:1]
    )
    try:
        inner, params = (
            base.order_by().annotate(walk_key=key).values_list("pk", "walk_key")
            .query.sql_with_params()
        )
    except EmptyResultSet:
        return []
    # The matches first (at most `most` + 1 read), their keys by the finding's, a top-N sort;
    # the window counts every match read, ranked or not (the unranked sort last). A ranked
    # row's finding id is the match's id: it breaks ties of the key, as in the queue.
    way = _direction(descending)
    sql = (
        f"SELECT id, qkey, count(*) OVER () FROM ({inner} LIMIT {int(most) + 1}) "  # noqa: S608
        f"AS matches (id, qkey) ORDER BY qkey {way} NULLS LAST, id {way} LIMIT {int(stop)}"
    )
    found = _rows(sql, params)
    if found and found[0][2] > most:
        return None
    return [row[0] for row in found if row[1] is not None][start:stop]


def team_ranked_ids(
    base: QuerySet[Finding], *, team_id: int, start: int, stop: int, descending: bool = False,
) -> list[int]:
    """Ids [start:stop] of `base`'s findings ranked in team `team_id`, in its queue order. A
    first page: from a walk of the key order bounded to WALK_ROWS findings; when that came
    back short, sorted from the matches, or when they are too many to sort, from the whole
    walk. A deeper slice (the kept order head) is read by PostgreSQL's own plan, on the
    (team, qkey, finding) index."""
    if stop > WALK_STOP_MAX:
        order = ("-ranked__qkey", "-ranked__finding_id") if descending else (
            "ranked__qkey", "ranked__finding_id")
        ranked = base.order_by().filter(ranked__team_id=team_id).order_by(*order)
        return list(ranked.values_list("pk", flat=True)[start:stop])
    ids, complete = bounded_walk(base, team_id=team_id, stop=stop, descending=descending)
    if not complete:
        found = sorted_matches(base, team_id=team_id, start=start, stop=stop,
                               descending=descending)
        if found is not None:
            return found
        ids, _ = bounded_walk(base, team_id=team_id, stop=stop, rows=0, descending=descending)
    return ids[start:stop]
