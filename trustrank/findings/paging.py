"""Paging the findings list at a million rows: totals without a COUNT per request, and the
contextual order without a sort of the whole team.

- Totals: `COUNT(*)` over a broad filter of a million-row team costs 100–350 ms even as a
  parallel index-only scan, and every page of every analyst asks for it. The total of a
  filter is kept under the teams' *generation* (generation.py: any write or ranking run makes
  a new key, so a total does not outlive a write), computed by one web worker at a time, and
  estimated rather than counted for a large list (totals.py).
- Contextual order: `ORDER BY rank NULLS LAST` over a LEFT JOIN makes PostgreSQL hash-join
  and sort the whole team (~2 s at 1M). Ranked findings come first anyway, so a page is read
  from the ranked part in the queue key's index order, then from the unranked rest
  (rank_rows.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import F, OrderBy, QuerySet
from django.db.models.expressions import RawSQL

from trustrank.findings.generation import findings_generation
from trustrank.findings.models import Finding
from trustrank.findings.totals import cached_count, list_total
from trustrank.lib.single_flight import cache_get_or_compute_once

# What reads the rows of a page from their ids, in that order: model instances
# (rows_for_ids), or the API's rows written straight from their columns
# (serializers.finding_rows_for_ids).
RowsLoader = Callable[[QuerySet[Finding], list[int]], list[Any]]


def rows_by_id(
    qs: QuerySet[Finding], item: slice, *, load: RowsLoader | None = None
) -> list[Any]:
    """`list(qs[item])` in two steps: the ids of the slice in the queryset's order, then those
    rows. When PostgreSQL must sort (a search matching 20,000 findings), it sorts narrow
    (id, sort key) tuples instead of whole rows with their JSON: 178 → 45 ms at 1M. When an
    index gives the order, the second query costs a millisecond."""
    return (load or rows_for_ids)(qs, list(qs.values_list("pk", flat=True)[item]))


def rows_for_ids(qs: QuerySet[Finding], ids: list[int]) -> list[Finding]:
    """The rows of `ids`, in that order (those `qs` still matches)."""
    if not ids:
        return []
    found = {f.pk: f for f in qs.order_by().filter(pk__in=ids)}
    return [found[pk] for pk in ids if pk in found]


# How many ids of a list's order are kept for the pages after the first: 100 pages of 50. A
# deep page (`page=90`) is an OFFSET: PostgreSQL walks 4,500 index entries and probes each
# finding for the filter (110 ms at 1M); from the kept ids it is one read of 50 rows.
ORDER_HEAD = 5000


def kept_order_head(
    sql_of: list[QuerySet[Any]], *, team_ids: Iterable[int], ids_of: Any
) -> list[int]:
    """The first ORDER_HEAD ids of a list (`ids_of(slice)` reads them), kept under the teams'
    generation and the list's SQL (that of the querysets `sql_of`, with their order)."""
    sqls = [qs.query.sql_with_params() for qs in sql_of]
    digest = hashlib.sha256(repr((sqls, ORDER_HEAD)).encode()).hexdigest()[:32]
    key = f"findings-order-head:{findings_generation(team_ids=team_ids)}:{digest}"
    return list(cache_get_or_compute_once(
        key, lambda: list(ids_of(slice(0, ORDER_HEAD))),
        timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
        wait=settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS,
    ))


def from_kept_head(item: slice) -> bool:
    """Whether a slice is a page after the first that lies within the kept head."""
    start = item.start or 0
    return start > 0 and item.stop is not None and item.stop <= ORDER_HEAD


# How many of a search's first matches (id and sort key) are kept with its total: 20 pages.
SEARCH_HEAD = 1000
# A search matching more findings than this is not sorted as a whole (at 10,000,000 findings
# `pkg1` matched 2,200,000: a rank probe each would take minutes); its total is capped here.
# One package's findings (20,000 at 10M) are still sorted: they share a severity, so they sit
# in one stretch of the list's order, and a walk of the order would pass millions first.
SEARCH_SORT_MAX = 25_000


# Relations to one-to-one rows a search's order may read (trustrank.ranking's rank, the due
# date): one row per finding, so the join neither repeats nor drops a match.
_ORDER_RELATIONS = {"ranked", "due"}


def _order_column(entry: Any) -> tuple[str, str] | None:
    """(values_list name, SQL direction) of one ORDER BY entry, None when it is something
    else than a column of the findings table or of a one-to-one row beside it."""
    if isinstance(entry, str):
        name, direction = entry.lstrip("-"), "DESC" if entry.startswith("-") else "ASC"
    elif isinstance(entry, OrderBy) and isinstance(entry.expression, F):
        name = str(getattr(entry.expression, "name", ""))
        direction = "DESC" if entry.descending else "ASC"
        if entry.nulls_last:
            direction += " NULLS LAST"
        elif entry.nulls_first:
            direction += " NULLS FIRST"
    else:
        return None
    if "." in name or name.startswith("-"):
        return None
    parts = name.split("__")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] not in _ORDER_RELATIONS):
        return None
    return ("id" if name == "pk" else name), direction


class Matches(Protocol):
    """A search's matches in the list's order, with their total: `SortedMatches`, or
    `search_groups.GroupedMatches` for a package search of one team."""

    @property
    def usable(self) -> bool: ...
    @property
    def broad(self) -> bool: ...
    def count(self) -> int: ...
    def ids(self, item: slice) -> list[int]: ...
    def query_ids(self, item: slice) -> list[int]: ...
    def ids_after(self, pk: int, n: int) -> list[int] | None: ...


class KeptHeadMatches:
    """What a search's matches answer from their total and first SEARCH_HEAD ids, kept
    (`_kept`); `query_ids` reads a slice past them."""

    def _kept(self) -> tuple[int, list[int]]:
        raise NotImplementedError

    def query_ids(self, item: slice) -> list[int]:
        raise NotImplementedError

    @property
    def broad(self) -> bool:
        """More than SEARCH_SORT_MAX matches: too many to sort per search. The caller pages
        it in the list's order (the matches are then common enough that a walk of the
        order's index finds a page soon) with a total capped at SEARCH_SORT_MAX."""
        return self._kept()[0] > SEARCH_SORT_MAX

    def count(self) -> int:
        return self._kept()[0]

    def ids(self, item: slice) -> list[int]:
        total, head = self._kept()
        start = item.start or 0
        stop = total if item.stop is None else item.stop
        if stop <= len(head) or len(head) == total:
            return head[start:stop]
        return self.query_ids(slice(start, stop))

    def ids_after(self, pk: int, n: int) -> list[int] | None:
        """The n ids after `pk` when the kept head has them; None to ask the database."""
        total, head = self._kept()
        if pk not in head:
            return None
        at = head.index(pk)
        rest = head[at + 1 : at + 1 + n]
        return rest if len(rest) == n or len(head) == total else None


class SortedMatches(KeptHeadMatches):
    """A search's matches in the list's order: found first, then sorted.

    With a selective filter and the list's order, PostgreSQL walks the order's index and
    tests each row, expecting matches spread evenly along it. Findings of one package share
    advisories and so priorities: a package's matches sit in one stretch of the order, and
    the walk read 200,000 rows to find 50 (0.7–4 s at 1M). Behind `OFFSET 0` the filter is
    answered first, from the search indexes, and only the matches are sorted. One query gives
    the total (a window count) and the first SEARCH_HEAD matches, kept under the teams'
    generation like the counts: the next pages and the next analyst read them from there.

    `usable` is false when the queryset's order is not columns of the findings table or of
    the one-to-one rows beside it (the rank, the due date): the contextual order of a search
    joins each match's rank, then sorts the matches, instead of walking the whole rank index.
    """

    def __init__(self, qs: QuerySet[Finding], *, team_ids: Iterable[int]) -> None:
        self._team_ids = list(team_ids)
        self._head: tuple[int, list[tuple[Any, ...]]] | None = None
        self._empty = False
        self._sql: tuple[str, Any, str] | None = None
        self._keys: list[tuple[str, Any]] = []
        order = list(qs.query.order_by) or (
            list(qs.model._meta.ordering or ()) if qs.query.default_ordering else []
        )
        fields: list[str] = []
        directions: list[str] = []
        for entry in order:
            found = _order_column(entry)
            if found is None:
                return
            fields.append(found[0])
            directions.append(found[1])
        columns = ["id"] + [f for f in fields if f != "id"]
        # A rank or due date comes from a correlated subquery, one index probe per match: as
        # a join, PostgreSQL hashed every rank of the team (a scan of 1,000,000 ranks, 1.1 s
        # at 1M, to sort 22,000 matches). It is asked outside the matches' query, once they
        # are counted: a broad search needs none (`_load`).
        plain = [name for name in columns if "__" not in name]
        keys: list[tuple[str, Any]] = []
        probed: dict[str, int] = {}
        for name in columns:
            if "__" not in name:
                keys.append((f'"matches"."{name}"', None))
                continue
            relation, column = name.split("__")
            if column == "finding_id" and relation in probed:
                # The row's link to the match is the match's id when the row exists: read
                # from the relation's other key, not probed again (a second index probe per
                # match, half of a 20,000-match search's time at 10M).
                keys.append(("", probed[relation]))
                continue
            remote = Finding._meta.get_field(relation).related_model
            assert remote is not None and not isinstance(remote, str)
            probed.setdefault(relation, len(keys))
            keys.append(remote._default_manager.filter(
                finding_id=RawSQL('"matches"."id"', ())
            ).values(column)[:1].query.sql_with_params())
        try:
            inner, params = qs.order_by().values_list(*plain).query.sql_with_params()
        except EmptyResultSet:
            self._empty = True
            return
        order_sql = ", ".join(
            f"{columns.index(f) + 1} {d}" for f, d in zip(fields, directions, strict=True)
        ) or "1"
        self._sql = (inner, params, order_sql)
        self._keys = keys

    @property
    def usable(self) -> bool:
        return self._empty or self._sql is not None

    def _select(
        self, *, tail: str, inner_limit: int | None = None
    ) -> list[tuple[Any, ...]]:
        """The matches' sort keys in order, (id, keys…); with `inner_limit`, at most that
        many matches are read, each row ends with their count, and when that count passes
        SEARCH_SORT_MAX the rows' keys asked by a subquery are not asked (NULL)."""
        assert self._sql is not None
        inner, params, order_sql = self._sql
        counted = inner_limit is not None
        columns: list[str] = []
        probes: list[str] = []
        key_params: list[Any] = []
        for n, (sql, sql_params) in enumerate(self._keys):
            if sql_params is None:
                columns.append(sql)
                continue
            if isinstance(sql_params, int):
                # A relation's link to the match (see __init__): the match's id where the
                # relation's probed key found a row.
                columns.append(f'CASE WHEN "matches"."key_{sql_params}" IS NULL THEN NULL '
                               'ELSE "matches"."id" END')
                continue
            # Django's own SQL and an integer; the values stay parameters.
            probes.append(
                (f'CASE WHEN "matches"."match_total" > {int(SEARCH_SORT_MAX)} THEN NULL '
                 f"ELSE ({sql}) END" if counted else f"({sql})") + f' AS "key_{n}"'
            )
            columns.append(f'"matches"."key_{n}"')
            key_params += sql_params
        # Django's own SQL, column positions and integers; the values stay parameters.
        source = (
            f"(SELECT *, count(*) OVER () AS match_total FROM ({inner} "  # noqa: S608
            f"LIMIT {int(inner_limit)}) AS matches OFFSET 0) AS matches"
            if inner_limit is not None else f"({inner} OFFSET 0) AS matches"
        )
        if probes:
            # Each probe once, in a layer of its own that `OFFSET 0` keeps PostgreSQL from
            # pulling up (it would copy a probe into each column that reads it).
            source = (f'(SELECT "matches".*, {", ".join(probes)} '  # noqa: S608
                      f"FROM {source} OFFSET 0) AS matches")
        if counted:
            columns.append('"matches"."match_total"')
        sql = f"SELECT {', '.join(columns)} FROM {source}"  # noqa: S608
        with connection.cursor() as cur:
            cur.execute(f"{sql} ORDER BY {order_sql}{tail}", (*key_params, *params))
            return [tuple(row) for row in cur.fetchall()]

    def _load(self) -> tuple[int, list[tuple[Any, ...]]]:
        if self._head is not None:
            return self._head
        if self._empty:
            self._head = (0, [])
            return self._head
        assert self._sql is not None
        inner, params, order_sql = self._sql
        # The keys too: a rank and a due date order sort the same columns' positions.
        digest = hashlib.sha256(
            repr((inner, params, order_sql, self._keys)).encode()
        ).hexdigest()[:32]
        key = f"findings-matches:{findings_generation(team_ids=self._team_ids)}:{digest}"

        def sort() -> tuple[int, list[tuple[Any, ...]]]:
            # At most SEARCH_SORT_MAX + 1 matches are read and counted, and sorted only when
            # they are not more: a broader search is paged by walking the list's order instead
            # (`broad`), so it asks no rank (25,001 probes, 0.5-0.6 s at 10M, for a count).
            rows = self._select(tail=f" LIMIT {SEARCH_HEAD}", inner_limit=SEARCH_SORT_MAX + 1)
            total = int(rows[0][-1]) if rows else 0
            return (total, [] if total > SEARCH_SORT_MAX else [row[:-1] for row in rows])

        self._head = cache_get_or_compute_once(
            key, sort, timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
            wait=settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS,
        )
        return self._head

    def _kept(self) -> tuple[int, list[int]]:
        total, head = self._load()
        return total, [row[0] for row in head]

    def query_ids(self, item: slice) -> list[int]:
        """The slice's ids from the database, sorted there, without the kept head."""
        if self._empty:
            return []
        start = int(item.start or 0)
        limit = "" if item.stop is None else f" LIMIT {int(item.stop) - start}"
        return [row[0] for row in self._select(tail=f"{limit} OFFSET {start}")]


def capped_cached_count(
    qs: QuerySet[Any], *, team_ids: Iterable[int], cap: int = 10_000
) -> tuple[int, bool]:
    """(count, capped) for pages that show "more than 10,000": counts at most cap + 1 rows."""
    n = cached_count(qs, team_ids=team_ids, cap=cap)
    return min(n, cap), n > cap


def filter_total(
    qs: QuerySet[Any], *, team_ids: list[int], cap: int | None, over_cap: bool
) -> tuple[int, bool, bool]:
    """(total, capped, estimated) of a list: the cap when it is known to be passed, a count
    of at most cap + 1 rows with a cap, else `list_total` (exact, or estimated when large)."""
    if cap is not None:
        n = cap + 1 if over_cap else cached_count(qs, team_ids=team_ids, cap=cap)
        return min(n, cap), n > cap, False
    total = list_total(qs, team_ids=team_ids)
    return total.n, False, not total.exact


class CountedRows:
    """A queryset whose total comes from `list_total` (`estimated` when it is), for
    DRF's page-number pagination. With `cap`, the total stops at cap (`capped` then says
    so); `over_cap` says the list is known to hold more than `cap` (a broad search): its
    total is then the cap without a count."""

    def __init__(
        self, qs: QuerySet[Finding], *, team_ids: Iterable[int], search: bool = False,
        matches: Matches | None = None, cap: int | None = None, over_cap: bool = False,
        load: RowsLoader | None = None,
    ) -> None:
        self._qs = qs
        self._load = load or rows_for_ids
        self._team_ids = list(team_ids)
        self._count: int | None = None
        self._cap = cap
        self._over_cap = over_cap
        self.capped = False
        self.estimated = False
        # A search: its matches are found, sorted and kept (SortedMatches).
        if matches is None and search:
            matches = SortedMatches(qs, team_ids=self._team_ids)
        self._matches = matches if matches is not None and matches.usable else None

    def count(self) -> int:
        if self._count is None:
            if self._matches is not None:
                self._count = self._matches.count()
            else:
                self._count, self.capped, self.estimated = filter_total(
                    self._qs, team_ids=self._team_ids, cap=self._cap, over_cap=self._over_cap
                )
        return self._count

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, item: slice) -> list[Any]:
        if self._matches is not None:
            return self._load(self._qs, self._matches.ids(item))
        if from_kept_head(item):
            try:
                head = kept_order_head(
                    [self._qs], team_ids=self._team_ids,
                    ids_of=lambda part: self._qs.values_list("pk", flat=True)[part],
                )
            except EmptyResultSet:
                return []
            return self._load(self._qs, head[item])
        return rows_by_id(self._qs, item, load=self._load)
