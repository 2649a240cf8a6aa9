"""A ranking run's due dates: which findings' due dates its decisions leave to recompute,
and the bulk insert of those that have none yet (a team's first run), beside the queue on
a second connection when they are many."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any, overload

import numpy as np
from django.conf import settings

from trustrank.findings.services.due_dates import (
    PolicyDays,
    finding_due_dates_apply,
    finding_due_dates_insert,
)
from trustrank.ranking.inputs import Gathered
from trustrank.ranking.inputs.ids import finding_pks
from trustrank.ranking.services.side import SideWrite
from trustrank.ranking.services.store_rows import QueueRows, Row
from trustrank.risk.inputs import DECISIONS
from trustrank.risk.results import RankResult


def _without_due_row(
    gathered: Gathered,
) -> Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None:
    """Whether each finding of an array of ids had no due-date row at a full gather
    (neither settled for a decision nor settled for none); None for a gather that did not
    read them."""
    settled, unsettled_rows = gathered.settled, gathered.unsettled_rows
    if settled is None or unsettled_rows is None:
        return None
    return lambda fids: ~(settled.has(fids) | _in(fids, unsettled_rows))


def _in(fids: np.ndarray[Any, Any], ids: Collection[int]) -> np.ndarray[Any, Any]:
    """Whether each of `fids` is one of `ids` (a few)."""
    return np.isin(fids, np.fromiter(ids, dtype=np.int64, count=len(ids)))


def _less(unsettled: dict[str, Any], done: set[int]) -> dict[str, Any]:
    """`unsettled` without the findings whose due date was inserted (`done`)."""
    ids = unsettled.get("finding_ids")
    if ids is None:
        return unsettled
    return {**unsettled, "finding_ids": [fid for fid in ids if fid not in done]}


def due_dates_unsettled(
    gathered: Gathered, rows: Mapping[int, Row],
    written_after: tuple[int, ...], *, inserted: bool = False,
) -> dict[str, Any]:
    """A full gather read which findings' due dates are settled for which decision: only
    the ranked findings whose new decision differs, and those written by someone else
    since the gather (their due fields may have changed), need recomputing. The result is
    the same as recomputing every finding (the due-date SQL checks each one it is given
    as it always does). `inserted`: a `DueInserter` inserted the due date of every ranked
    finding that had no row, so those are left out (on a team's first run, all of them:
    no list of a million ids is made to be emptied again)."""
    settled = gathered.settled
    if settled is None:
        return {}
    having = gathered.unsettled_rows or frozenset()
    columns = QueueRows.of(rows)
    todo: list[int]
    if not settled and not having:
        # No finding had a due-date row: every decision differs from none.
        todo = [] if inserted else columns.fid.tolist()
    else:
        # Each finding's decision against the one its due date is settled for (-1: none),
        # column by column.
        differs = settled.codes_of(columns.fid) != columns.decision
        if inserted:
            differs &= settled.has(columns.fid) | _in(columns.fid, having)
        todo = columns.fid[differs].tolist()
    if inserted:
        written = np.asarray(written_after, dtype=np.int64)
        todo.extend(written[settled.has(written) | _in(written, having)
                            | (columns.places(written) < 0)].tolist())
    else:
        todo.extend(written_after)
    return {"finding_ids": todo, "checked_policy": gathered.policy}


class _Pairs(Sequence[tuple[int, str]]):
    """(finding id, decision) pairs kept as two arrays (ids, indexes in `DECISIONS`): a
    million tuples held until the insert is done were 80 MB at the run's peak. A slice is
    made into tuples when it is read (the insert reads 50,000 at a time)."""

    def __init__(self, ids: np.ndarray[Any, Any], decisions: np.ndarray[Any, Any]) -> None:
        self.ids, self.decisions = ids, decisions

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, at: int) -> tuple[int, str]: ...

    @overload
    def __getitem__(self, at: slice) -> list[tuple[int, str]]: ...

    def __getitem__(self, at: int | slice) -> tuple[int, str] | list[tuple[int, str]]:
        if isinstance(at, slice):
            return list(zip(self.ids[at].tolist(),
                            map(DECISIONS.__getitem__, self.decisions[at].tolist()),
                            strict=True))
        return int(self.ids[at]), DECISIONS[int(self.decisions[at])]


class DueInserter:
    """The first-run due dates of a large queue, inserted by a thread on a connection of
    its own while this one stores the queue: each insert is PostgreSQL work for seconds at
    a million findings, and two backends do it on two cores at once.

    The thread's transaction commits on its own: should the run fail afterwards, the due
    dates stay, computed from the decisions the run found (as the next run would, which
    recomputes any whose decision then differs). Only findings with no due-date row at the
    gather are inserted, in id order; a row written meanwhile (a date set by hand) makes
    the thread insert by the upsert that keeps it."""

    def __init__(self, team_id: int, decisions: Sequence[tuple[int, str]],
                 policy: PolicyDays) -> None:
        self.decisions = decisions
        self._side = SideWrite("ranking-due-dates", lambda: finding_due_dates_insert(
            team_id=team_id, decisions=decisions, checked_policy=policy))

    @classmethod
    def start(cls, team_id: int, gathered: Gathered, result: RankResult,
              fid: np.ndarray[Any, Any] | None = None) -> DueInserter | None:
        """The thread inserting the due dates of the findings with no due-date row, or None
        when they are too few to be worth one. `fid`: the database id of the finding at
        each place of the queue, when the caller made it (`store_columns.place_ids`)."""
        rowless = _without_due_row(gathered)
        if rowless is None or gathered.policy is None or gathered.settled is None:
            return None
        above = settings.TRUSTRANK_RANKING_DUE_THREAD_ABOVE
        if len(result.findings) - len(gathered.settled) < above:
            return None
        # Column by column (a lookup and a test per finding in Python cost seconds at a
        # million), sorted by id with numpy.
        n = len(result.findings)
        ids = fid if fid is not None else finding_pks(
            gathered.finding_ids, map(itemgetter(0), result.findings), n)
        places = np.arange(n)
        if gathered.settled or gathered.unsettled_rows:
            places = places[rowless(ids)]
        if len(places) < above:
            return None
        places = places[np.argsort(ids[places], kind="stable")]
        decisions: Sequence[tuple[int, str]]
        if result.columns is not None:
            decisions = _Pairs(ids[places], result.columns.decision[places])
        else:
            decided = list(map(itemgetter(3), result.findings))
            decisions = list(zip(ids[places].tolist(),
                                 map(decided.__getitem__, places.tolist()), strict=True))
        return cls(team_id, decisions, gathered.policy)

    @property
    def inserted(self) -> int | None:
        """How many due dates the thread inserted (None: the policy had changed)."""
        return self._side.result()

    def wait(self) -> None:
        """Wait for the thread, whatever it did (the run failed: its error is the run's)."""
        self._side.wait()

    def finish(self, unsettled: dict[str, Any]) -> dict[str, Any]:
        """Wait for the thread; `unsettled` (made without what it inserted:
        `due_dates_unsettled(inserted=True)`) as it is, or {} when the policy changed."""
        if self.inserted is None:
            return {}  # the policy changed since the gather: recompute every finding
        return unsettled


def due_dates_apply(
    team_id: int, gathered: Gathered, unsettled: dict[str, Any],
    written_after: tuple[int, ...], rows: Mapping[int, Row],
    ranked_table: str = "ranking_rankedfinding",
) -> None:
    """Recompute the due dates `unsettled` names. Of a full run's, those of findings with
    no due-date row at all (every finding on a team's first run) are inserted in bulk
    (`finding_due_dates_insert`); the rest go through the recomputation, which checks
    each finding as it is now, from the ranked rows of `ranked_table`."""
    ids: list[int] | None = unsettled.get("finding_ids")
    policy = unsettled.get("checked_policy")
    rowless = _without_due_row(gathered)
    if ids and policy is not None and rowless is not None:
        columns = QueueRows.of(rows)
        asked = np.asarray(ids, dtype=np.int64)
        # In id order: the primary key's B-tree then grows at its right edge instead of
        # splitting pages all over (the queue's order is random by id).
        ranked = np.sort(asked[rowless(asked) & ~_in(asked, written_after)])
        at = columns.places(ranked)
        fresh = ranked[at >= 0].tolist()
        if fresh:
            done = finding_due_dates_insert(
                team_id=team_id, checked_policy=policy,
                decisions=_Pairs(ranked[at >= 0], columns.decision[at[at >= 0]]),
            )
            # None: the policy changed since the gather, so every finding is recomputed.
            unsettled = {} if done is None else _less(unsettled, set(fresh))
    finding_due_dates_apply(team_id=team_id, ranked_table=ranked_table, **unsettled)

