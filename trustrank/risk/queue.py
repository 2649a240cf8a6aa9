"""An incremental run's work on the queue, in time proportional to what changed.

A million ranked findings, of which an SBOM change rescored a few hundred: walking the
whole previous queue in Python to find them, and again to merge them back, cost more than
everything else of such a run. `QueueIndex` (`queue_index`) keeps, per place in a queue,
small integer codes of what the finding there depends on (its project version, its
context's project version, its environment and service, for non-vulnerability findings),
so the places to rescore are found by array operations; `merge` puts the
rescored findings back, renumbering only the findings whose rank changed and naming the
places whose finding is not the previous one (what the store has to write).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any

import numpy as np

from trustrank.risk.buffers import detach
from trustrank.risk.inputs import DECISIONS, Finding
from trustrank.risk.pieces import Pieces, PiecesBuilder
from trustrank.risk.queue_index import QueueIndex
from trustrank.risk.queue_key import id_places, queue_keys
from trustrank.risk.queue_moves import KeptPieces, PlaceRanges
from trustrank.risk.ranked_queue import RankedQueue, held_of
from trustrank.risk.results import RankedFinding

_new_ranked = tuple.__new__


@dataclass
class QueueColumns:
    """A scored queue before it is sorted, one entry per finding in input order: score,
    decision (index in `DECISIONS`), deployed, SSVC level (`scoring.ssvc_level`), and
    codes of the ranked finding's `facts` (exploitation, automatable, the advisory's
    factors: `mids`) and `context` (deployed … context factors: `tails`)."""

    score: np.ndarray[Any, Any]
    decision: np.ndarray[Any, Any]
    deployed: np.ndarray[Any, Any]
    mid: np.ndarray[Any, Any]
    tail: np.ndarray[Any, Any]
    mids: list[tuple[Any, ...]]
    tails: list[tuple[Any, ...]]
    level: np.ndarray[Any, Any]

    @classmethod
    def empty(cls, n: int) -> QueueColumns:
        # Narrow codes: a full run's result keeps them (`RankedColumns`) beside a million
        # ranked findings.
        return cls(np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.int8),
                   np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int32),
                   np.zeros(n, dtype=np.int32), [], [], np.zeros(n, dtype=np.int8))


@dataclass(frozen=True)
class RankedColumns:
    """A full run's queue as columns, place k being `RankResult.findings[k]`: its score,
    its decision (index in `DECISIONS`), and codes of its `facts` and `context`:
    `mids[mid[k]]` is its `facts` (exploitation, automatable, the advisory's factors) and
    `tails[tail[k]]` its `context` (deployed … context factors), the very objects the
    ranked finding holds. Two
    places with equal codes share those objects, so what a store makes per context is made
    per distinct pair of codes, by array operations instead of a pass over a million
    tuples."""

    score: np.ndarray[Any, Any]
    decision: np.ndarray[Any, Any]
    mid: np.ndarray[Any, Any]
    tail: np.ndarray[Any, Any]
    mids: list[tuple[Any, ...]]
    tails: list[tuple[Any, ...]]
    # Each place's integer queue key (`queue_key.queue_key`, int64): ascending, and the
    # queue is in order of (key, finding id as a number) for database ids.
    qkey: np.ndarray[Any, Any]

    def release(self) -> list[np.ndarray[Any, Any]]:
        """Its arrays that nothing else holds (`buffers.detach`); the columns are empty
        after."""
        return detach(self, ("score", "decision", "mid", "tail", "qkey"))


def assemble(
    records: Sequence[Finding], cols: QueueColumns, *, with_index: bool = True,
) -> tuple[tuple[RankedFinding, ...], QueueIndex | None, RankedColumns]:
    """The queue of `records` scored as `cols`, its index (unless not `with_index`) and its
    columns. Queue order:
    decision (most urgent first), deployed before deployed nowhere, SSVC level (highest
    first), score (highest first), finding id (`queue_key.id_key`); sorted by numpy on the
    integer queue key (`queue_key.queue_keys`, which packs the parts before the id) and
    the id's place among the ids, and each ranked finding made of its columns by passes
    in C. Raises ValueError when two different scores share a key (closer than 0.0001:
    the engine rounds to 4 decimals), rather than give a queue that the key, and so the
    database, orders otherwise."""
    n = len(records)
    ids = list(map(attrgetter("id"), records))
    qkey = queue_keys(cols.decision, cols.deployed, cols.level, cols.score)
    order = np.lexsort((id_places(ids), qkey))
    qkey = qkey[order]
    score = cols.score[order]
    if ((qkey[1:] == qkey[:-1]) & (score[1:] != score[:-1])).any():
        raise ValueError("scores closer than 0.0001 share a queue key")
    places = order.tolist()
    columns = RankedColumns(score=score, decision=cols.decision[order],
                            mid=cols.mid[order], tail=cols.tail[order], mids=cols.mids,
                            tails=cols.tails, qkey=qkey)
    # The rank objects made before the ranked findings rather than one beside each: the
    # tuples then fill arenas of their own, which the allocator gives back whole once a
    # later full run has dropped them; interleaved, no arena emptied and the memory stayed
    # with the process through the store after it.
    ranks = list(range(1, n + 1))
    rows = zip(map(ids.__getitem__, places), ranks, _shared_scores(columns.score),
               map(DECISIONS.__getitem__, columns.decision.tolist()),
               map(cols.mids.__getitem__, columns.mid.tolist()),
               map(cols.tails.__getitem__, columns.tail.tolist()),
               map(records.__getitem__, places), strict=True)
    findings: tuple[RankedFinding, ...] = tuple(map(_new_ranked, repeat(RankedFinding), rows))
    del ranks
    return findings, QueueIndex.build(findings) if with_index else None, columns


def _shared_scores(score: np.ndarray[Any, Any]) -> Iterable[float]:
    """The scores as floats, one object per distinct score: a queue has a few thousand
    distinct scores, and a float object per ranked finding was 24 bytes of each, kept with
    the queue. Scores are never negative nor NaN (`engine._Scorer` clamps them to
    0-100): were one, the values would not be shared (-0.0 equals 0.0, and numpy groups
    NaNs), to keep every value as it is."""
    if np.signbit(score).any() or np.isnan(score).any():
        return score.tolist()
    distinct, code = np.unique(score, return_inverse=True)
    return map(distinct.tolist().__getitem__, code.reshape(-1))


def _places_of(
    pieces: list[tuple[int, int]],
) -> tuple[np.ndarray[Any, Any], PlaceRanges, KeptPieces]:
    """Of a queue made of `pieces` (old place of its first finding or -1 for fresh ones,
    length): the places of its fresh findings (ascending, int64); the places whose
    finding is not the one the previous queue had there (ascending); and the pieces of
    kept findings. No array of the queue's length: a few entries per piece."""
    fresh: list[int] = []
    # A piece's places changed unless its findings kept their places (fresh ones never do).
    moved: list[tuple[int, int]] = []
    kept: list[tuple[int, int, int]] = []
    at = 0
    for start, length in pieces:
        if start < 0:
            fresh.extend(range(at, at + length))
        else:
            kept.append((start, at, length))
        if start != at:
            if moved and moved[-1][1] == at:
                moved[-1] = (moved[-1][0], at + length)
            else:
                moved.append((at, at + length))
        at += length
    return np.asarray(fresh, dtype=np.int64), PlaceRanges(moved), KeptPieces.of(kept)


@dataclass(frozen=True)
class Moves:
    """Where the findings of a merged queue were: `kept`, the runs of findings kept from
    the previous queue (where each run was, where it is); `fresh`, the places of the
    rescored and new findings (ascending), which are every other place; `previous`, the
    previous queue's length. A store that holds the previous queue's rows by place copies
    the kept findings' rows from them a run at a time (`RankResult.moves`), and finds a
    finding's row among them from where its row was."""

    fresh: np.ndarray[Any, Any]
    previous: int
    kept: KeptPieces


@dataclass(frozen=True)
class Merged:
    findings: RankedQueue
    # Places (ascending) whose finding is not the one the previous queue had there, as
    # ranges (one finding rising renumbers every place below it).
    changed: PlaceRanges
    index: QueueIndex
    moves: Moves


def merge(
    previous: Sequence[RankedFinding], index: QueueIndex, removed: Sequence[int],
    fresh: Sequence[tuple[Any, tuple[Any, ...]]], queue_key: Callable[[RankedFinding], Any],
) -> Merged:
    """The queue `previous` less the places `removed` (ascending), with `fresh` (sort key,
    ranked-finding fields after the rank; ascending by key) merged in by key. Every kept
    finding is the same object, read with its new rank (`RankedQueue`); `changed` names
    the places whose finding is not the one that was there. `index` is `previous`'s (left
    as it is); the result carries the new queue's."""
    held = held_of(previous)
    # Runs of kept findings: (first kept index, first old place, length).
    runs: list[tuple[int, int, int]] = []
    start = n_kept = 0
    for p in (*removed, len(previous)):
        if p > start:
            runs.append((n_kept, start, p - start))
            n_kept += p - start
        start = p + 1
    # Where each fresh finding goes among the kept ones, searched in the previous queue
    # itself (in key order, the removed places included): its place there less the
    # removed places before it. No list of the kept findings is made (ten million
    # pointers copied twice more).
    cuts = []
    for key, _row in fresh:
        at = bisect_left(held, key, key=queue_key)
        cuts.append(at - bisect_left(removed, at))

    # The new queue as pieces of the previous one's sequences and of `made`, the fresh
    # ranked findings (`pieces.Pieces`: no list of ten million made anew).
    out, before = PiecesBuilder(), Pieces.of(held)
    made: list[RankedFinding] = []
    # The new queue in pieces: (old place of its first finding or -1 for fresh, length).
    pieces: list[tuple[int, int]] = []
    fresh_codes: list[tuple[int, int, int, int]] = []
    new, cls = _new_ranked, RankedFinding
    j, n_fresh = 0, len(fresh)

    def emit_fresh(upto: int) -> None:
        nonlocal j
        first = j
        while j < n_fresh and cuts[j] <= upto:
            key, row = fresh[j]
            r = new(cls, (key[-1], len(out) + 1, *row))
            out.add(made, len(made), 1)
            made.append(r)
            fresh_codes.append(index.codes_of(r))
            j += 1
        if j > first:
            pieces.append((-1, j - first))

    for first_kept, first_old, length in runs:
        a, end = first_kept, first_kept + length
        while a < end:
            emit_fresh(a)  # the fresh findings that go before kept[a]
            b = min(end, cuts[j]) if j < n_fresh else end
            old = first_old + a - first_kept
            out.add_from(before, old, b - a)
            pieces.append((old, b - a))
            a = b
    emit_fresh(n_kept)
    findings = RankedQueue(out.build())
    fresh_places, changed, kept = _places_of(pieces)
    moved = index.moved(previous, findings, pieces, fresh_codes, changed, removed)
    return Merged(findings, changed, moved, Moves(fresh_places, len(previous), kept))
