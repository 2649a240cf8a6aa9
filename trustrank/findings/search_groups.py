"""A package search in the contextual order from the search groups, not the findings.

At ten million findings a search of one package (`pkg345`: 20,000 matches) read each
match's findings row (the trigram recheck) and its rank row (the key to sort by): ~40,000
pages, a package's findings being spread over the whole table; 300–550 ms alone, most of
the findings list's p95 under load. Here a search value that can only match the component
half of the search text (findings.SearchGroup) is answered without them:

1. the component texts that contain it, in the small groups table (its trigram index); a
   value that some advisory text also contains (an id, an alias) or that holds a space
   (which could span the halves) is answered as before. A purl search (`pkg:…`, a prefix
   of the purl) keeps the texts whose purl starts with it, decided by one finding each;
2. each group's first matches in queue order from the ranked rows' index (team, group,
   key, finding): a few index pages, and the total from the same index;
3. the team's findings written since its latest ranking run began (its ranked rows are as
   of then): few, and checked against the whole filter itself. Their rows are left out of
   the index's answer, so a finding closed or renamed since is not listed, and one opened
   or renamed since is listed where the filter puts it.

The answer is what the filter and the list's order give (the same ids, in the same order,
with the same total): `tests/findings/test_search_groups.py` compares them. It serves one
team's list with no filter but the search (and the default open findings) in the rank
order; any other list is answered by `paging.SortedMatches`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from trustrank.findings import paging
from trustrank.findings.generation import findings_generation
from trustrank.findings.models import Finding, SearchGroup
from trustrank.findings.paging import SEARCH_HEAD, KeptHeadMatches
from trustrank.findings.search import is_purl_search
from trustrank.lib.single_flight import cache_get_or_compute_once

# More component texts than this contain the value (`pkg1` matches hundreds of packages):
# a merge of that many index ranges is not cheaper than the matches themselves.
GROUPS_MAX = 64
# More findings written since the latest run than this: answered as before until the next
# run (checking them against the filter would cost what the index saves).
WRITTEN_MAX = 5_000

# A place in the rank order: ranked findings by (key, id), then the unranked by baseline
# priority and id, both descending.
_Key = tuple[int, int, int, float, int]


def _ranked_table() -> str:
    model = Finding._meta.get_field("ranked").related_model
    assert model is not None and not isinstance(model, str)
    return str(model._meta.db_table)


def _rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()]


def _purl_groups(table: str, team_id: int, groups: list[int], prefix: str) -> list[int]:
    """Those of the team's `groups` whose purl starts with `prefix` (lower-cased). A group's
    findings share their purl, so one finding of the team that has the group now decides
    it (one whose component changed since the run is skipped: its row is stale)."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    # Django's own table names and a constant expression; the values are parameters.
    return sorted(row[0] for row in _rows(
        "SELECT g.grp FROM unnest(%s::bigint[]) AS g(grp) CROSS JOIN LATERAL ("  # noqa: S608
        f"SELECT f.component_purl FROM {table} r "
        "JOIN findings_finding f ON f.id = r.finding_id "
        "WHERE r.team_id = %s AND r.search_group = g.grp AND f.search_group = g.grp "
        "LIMIT 1) AS one "
        "WHERE lower(one.component_purl) LIKE %s",
        [groups, team_id, pattern]))


class GroupedMatches(KeptHeadMatches):
    """The matches of one team's search in the rank order, as `paging.SortedMatches` gives
    them (`paging.KeptHeadMatches`), found from the search groups.
    Made by `find`, which answers None where it cannot."""

    usable = True

    def __init__(self, qs: QuerySet[Finding], *, team_id: int, groups: list[int],
                 written: list[int], spellings: list[str]) -> None:
        self._qs, self._team_id, self._groups = qs, team_id, groups
        self._written, self._spellings = written, spellings
        self._head: tuple[int, list[int]] | None = None
        self._table = _ranked_table()

    @classmethod
    def find(
        cls, qs: QuerySet[Finding], *, team_id: int, spellings: Sequence[str],
        as_of: Callable[[int], datetime | None],
    ) -> GroupedMatches | None:
        """The matches of `qs` (one team's findings, filtered by nothing but the search
        value's `spellings` and the open states, in the rank order), or None when the
        groups cannot answer it: a spelling that holds a space or that an advisory text
        contains, too many groups, no ranking run (`as_of`: when the team's ranked rows
        were read, less the clock skew), rows without a group, too many findings written
        since."""
        if not spellings or any(" " in s or len(s) < 3 for s in spellings):
            return None
        # First: rows a run stores after this are newer, so the findings written since
        # are a superset of those their rows do not show.
        since = as_of(team_id)
        if since is None:
            return None
        purl = [s for s in spellings if is_purl_search(s)]
        if purl and len(purl) != len(spellings):
            return None
        texts = SearchGroup.objects.none()
        for s in spellings:
            texts |= SearchGroup.objects.filter(text__contains=s)
        if purl:
            # A purl search matches purls only, from their start (search.purl_condition):
            # advisory texts cannot match it, and a component text that holds the value
            # is a candidate, kept below when its purl starts with it.
            texts = texts.filter(part=SearchGroup.COMPONENT_PART)
        found = list(texts.values_list("part", "id")[: GROUPS_MAX + 1])
        if len(found) > GROUPS_MAX or any(part != SearchGroup.COMPONENT_PART
                                          for part, _id in found):
            return None
        table = _ranked_table()
        if _rows(f"SELECT 1 FROM {table} WHERE team_id = %s "  # noqa: S608
                 "AND search_group IS NULL LIMIT 1", [team_id]):
            return None
        groups = sorted(pk for _part, pk in found)
        if purl and groups:
            groups = _purl_groups(table, team_id, groups, purl[0])
        written = list(Finding.objects.filter(team_id=team_id, updated_at__gte=since)
                       .values_list("id", flat=True)[: WRITTEN_MAX + 1])
        if len(written) > WRITTEN_MAX:
            return None
        return cls(qs, team_id=team_id, groups=groups, written=sorted(written),
                   spellings=sorted(spellings))

    def _written_matches(self) -> list[tuple[_Key, int]]:
        """The findings written since the run that match the whole filter, with their
        places."""
        if not self._written:
            return []
        out: list[tuple[_Key, int]] = []
        for pk, qkey, baseline in self._qs.filter(id__in=self._written).order_by().values_list(
            "id", "ranked__qkey", "baseline_priority"
        ):
            key: _Key = ((0, int(qkey), pk, 0.0, 0) if qkey is not None
                         else (1, 0, 0, -float(baseline or 0.0), -pk))
            out.append((key, pk))
        return out

    def _indexed(self, limit: int | None) -> tuple[int, list[tuple[_Key, int]]]:
        """(how many ranked rows the groups hold, less the written findings', and the first
        `limit` of them in order, all with None). More than a search sorts
        (`paging.SEARCH_SORT_MAX`): (SEARCH_SORT_MAX + 1, []), counted no further (the
        caller pages a broad search by walking the list's order)."""
        table, team, groups = self._table, self._team_id, self._groups
        if not groups:
            return 0, []
        cap = paging.SEARCH_SORT_MAX + 1 + len(self._written)
        # Django's own table name; the values are parameters.
        total = int(_rows(f"SELECT count(*) FROM (SELECT FROM {table} "  # noqa: S608
                          "WHERE team_id = %s AND search_group = ANY(%s::bigint[]) LIMIT %s) s",
                          [team, groups, cap])[0][0])
        if total >= cap:
            return paging.SEARCH_SORT_MAX + 1, []
        stale = {row[0] for row in _rows(
            f"SELECT finding_id FROM {table} WHERE finding_id = ANY(%s::bigint[]) "  # noqa: S608
            "AND team_id = %s AND search_group = ANY(%s::bigint[])",
            [self._written, team, groups])} if self._written else set()
        n = total if limit is None else min(total, limit + len(stale))
        first = _rows(
            "SELECT e.qkey, e.finding_id FROM unnest(%s::bigint[]) AS g(grp) "  # noqa: S608
            "CROSS JOIN LATERAL (SELECT r.qkey, r.finding_id FROM "
            f"{table} r WHERE r.team_id = %s AND r.search_group = g.grp "
            "ORDER BY r.qkey, r.finding_id LIMIT %s) AS e ORDER BY 1, 2 LIMIT %s",
            [groups, team, n, n],
        ) if n else []
        return total - len(stale), [((0, int(k), int(f), 0.0, 0), int(f))
                                    for k, f in first if f not in stale]

    def _ordered(self, limit: int | None) -> tuple[int, list[int]]:
        """(the total, the first `limit` ids in order; all with None)."""
        total, indexed = self._indexed(limit)
        if total > paging.SEARCH_SORT_MAX:
            return total, []
        written = self._written_matches()
        merged = sorted(indexed + written)
        ids = [pk for _key, pk in (merged if limit is None else merged[:limit])]
        return total + len(written), ids

    def _kept(self) -> tuple[int, list[int]]:
        if self._head is None:
            digest = hashlib.sha256(repr(
                (self._team_id, self._spellings, self._groups, self._written)
            ).encode()).hexdigest()[:32]
            key = (f"findings-groups:{findings_generation(team_ids=[self._team_id])}:"
                   f"{digest}")
            self._head = cache_get_or_compute_once(
                key, lambda: self._ordered(SEARCH_HEAD),
                timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
                wait=settings.TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS,
            )
        return self._head

    def query_ids(self, item: slice) -> list[int]:
        start = int(item.start or 0)
        return self._ordered(None if item.stop is None else int(item.stop))[1][start:]
