"""The findings list's contextual order as a sequence a Paginator pages: the ranked findings
in their teams' queue order, then the unranked (paging.py keeps the totals and the order's
kept head this reads)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import QuerySet

from trustrank.findings.models import Finding
from trustrank.findings.paging import (
    RowsLoader,
    filter_total,
    from_kept_head,
    kept_order_head,
    rows_for_ids,
)
from trustrank.findings.totals import cached_count
from trustrank.findings.walk import team_ranked_ids

# What counts the ranks of findings in their teams' queues (finding id -> rank; the ranked
# among `ids` only): the ranking's (trustrank.ranking.ranks), which the pages pass in, as
# this app sits below ranking.
RankCounter = Callable[[list[int]], dict[int, int]]


class RankOrderedRows:
    """A filtered findings queryset in contextual order, as a sequence Django's Paginator
    (and DRF's) can page: ranked findings by rank, then the unranked by baseline priority;
    `descending`: the unranked by id, then the ranked by rank, last first.

    A rank is a place in its team's queue, whose order is the (team, qkey, finding) index's.
    One team's part is read from that index without a sort. Several teams' parts are merged
    by the ranks counted (`ranks_of`) for each team's first `stop` findings of the slice:
    teams x stop counts (~0.15 ms each; a first page of 51 over 3 teams ~25 ms, the kept head
    of 5,000 ~0.75 s a team, once per generation). Ties of rank between teams go as in
    `filters.findings_ordered`: by baseline priority, then id, descending (`descending`: by
    id)."""

    def __init__(
        self, qs: QuerySet[Finding], *, team_ids: Iterable[int], cap: int | None = None,
        over_cap: bool = False, load: RowsLoader | None = None,
        ranks_of: RankCounter | None = None, descending: bool = False,
    ) -> None:
        self._team_ids = sorted(set(team_ids))
        self._load = load or rows_for_ids
        self._cap = cap
        self._over_cap = over_cap
        self._ranks_of = ranks_of
        self._descending = descending
        self.capped = False
        self.estimated = False
        base = self._base = qs.order_by()
        key = ("-ranked__qkey", "-ranked__finding_id") if descending else (
            "ranked__qkey", "ranked__finding_id")
        # The team condition on the ranks too, so PostgreSQL walks (team, qkey, finding).
        self._ranked = base.filter(ranked__team_id__in=self._team_ids).order_by(*key)
        unranked = base.filter(ranked__isnull=True)
        self._unranked = (
            unranked.order_by("id") if descending
            else unranked.order_by("-baseline_priority", "-id")
        )
        self._first_count: int | None = None
        self._count: int | None = None

    @property
    def _first(self) -> QuerySet[Finding]:
        return self._unranked if self._descending else self._ranked

    @property
    def first_count(self) -> int:
        """How many findings the first part holds (the ranked, or with `descending` the
        unranked)."""
        if self._first_count is None:
            self._first_count = cached_count(self._first, team_ids=self._team_ids)
        return self._first_count

    def count(self) -> int:
        # The whole filter's total: one count without the ranks' join (the two parts
        # partition it), shared with the other orders' totals under the same key.
        if self._count is None:
            self._count, self.capped, self.estimated = filter_total(
                self._base, team_ids=self._team_ids, cap=self._cap, over_cap=self._over_cap
            )
        return self._count

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, item: slice) -> list[Any]:
        if not isinstance(item, slice):
            raise TypeError("RankOrderedRows pages by slices")
        start = item.start or 0
        stop = item.stop if item.stop is not None else self.count()
        if stop <= start:
            return []
        if from_kept_head(slice(start, stop)):
            try:
                head = kept_order_head(
                    [self._ranked, self._unranked], team_ids=self._team_ids,
                    ids_of=self._ids,
                )
            except EmptyResultSet:
                return []
            return self._load(self._base, head[start:stop])
        return self._load(self._base, self._ids(slice(start, stop)))

    def _part_ids(self, first: bool, start: int, stop: int) -> list[int]:
        if first != self._descending:
            return self._ranked_ids(start, stop)
        return list(self._unranked.values_list("pk", flat=True)[start:stop])

    def _ids(self, item: slice) -> list[int]:
        """The ids of a slice of the order, read from the two parts."""
        start, stop = int(item.start or 0), int(item.stop)
        # The first part without counting it: a page within it (the first pages of a ranked
        # team) needs no total, and a short read tells where it ends.
        ids: list[int] = []
        if self._first_count is None or start < self._first_count:
            ids = self._part_ids(True, start, stop)
            if len(ids) == stop - start:
                return ids
            if ids or start == 0:
                self._first_count = start + len(ids)
        first = self.first_count
        if stop > first:
            ids += self._part_ids(False, max(0, start - first), stop - first)
        return ids

    def _ranked_ids(self, start: int, stop: int) -> list[int]:
        """Ids [start:stop] of the ranked part: one team's queue order (walk.py), or the
        teams' first `stop` each, merged by their counted ranks."""
        if len(self._team_ids) == 1:
            return team_ranked_ids(self._base, team_id=self._team_ids[0], start=start,
                                   stop=stop, descending=self._descending)
        candidates = [
            pk for team_id in self._team_ids
            for pk in team_ranked_ids(self._base, team_id=team_id, start=0, stop=stop,
                                      descending=self._descending)
        ]
        if not candidates:
            return []
        if self._ranks_of is None:
            raise ValueError("several teams' ranks are merged by their counted ranks: "
                             "pass ranks_of")
        ranks = self._ranks_of(candidates)
        baseline = dict(
            Finding.objects.filter(pk__in=candidates).values_list("pk", "baseline_priority")
        )
        if self._descending:
            candidates.sort(key=lambda pk: (-ranks[pk], pk))
        else:
            candidates.sort(key=lambda pk: (ranks[pk], -baseline[pk], -pk))
        return candidates[start:stop]
