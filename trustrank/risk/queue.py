"""An incremental run's work on the queue, in time proportional to what changed.

A million ranked findings, of which an SBOM change rescored a few hundred: walking the
whole previous queue in Python to find them, and again to merge them back, cost more than
everything else of such a run. `QueueIndex` keeps, per place in a queue, small integer
codes of what the finding there depends on (its project version, its context's project
version, its environment and service, for non-vulnerability findings) and where each
finding id sits, so the places to rescore are found by array operations; `merge` puts the
rescored findings back, renumbering only the findings whose rank changed and naming the
places whose finding is not the previous one (what the store has to write).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from trustrank.risk.buffers import BUFFERS, detach
from trustrank.risk.inputs import DECISIONS, Finding
from trustrank.risk.queue_key import id_places, queue_keys
from trustrank.risk.queue_moves import KeptPieces, PlaceRanges
from trustrank.risk.ranked_queue import RankedQueue, held_of
from trustrank.risk.results import RankedFinding

# RankedFinding fields by position: 0 finding_id, 5 context (3: its project version),
# 6 finding.
_ID, _CONTEXT, _RECORD = 0, 5, 6

_record_version = attrgetter("project_version")
_record_env = attrgetter("environment")


def _codes(values: Sequence[Any] | Any, table: dict[Any, int], count: int) -> np.ndarray[Any, Any]:
    """`values` as codes of `table` (new values get new codes; code 0 is the empty string)."""
    values = list(values)
    for value in set(values) - table.keys():
        table[value] = len(table)
    return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=count)


@dataclass
class QueueIndex:
    """Codes per place of one queue, and each finding id's place."""

    versions: dict[str, int]
    envs: dict[str, int]
    services: dict[tuple[str, str], int]
    record_version: np.ndarray[Any, Any]
    context_version: np.ndarray[Any, Any]
    env: np.ndarray[Any, Any]
    service: np.ndarray[Any, Any]
    # Finding id -> place; None when the caller looks places up itself (a ranking run
    # knows each finding's stored rank), made on first use otherwise.
    place: dict[str, int] | None = None

    @classmethod
    def build(cls, findings: Sequence[RankedFinding]) -> QueueIndex:
        *_parts, index = cls.in_parts(findings, part=max(1, len(findings)))
        assert index is not None
        return index

    @classmethod
    def in_parts(
        cls, findings: Sequence[RankedFinding], part: int = 100_000,
    ) -> Iterator[QueueIndex | None]:
        """`build`, `part` places at a time: None after each part, then the index (a caller
        can do the work between other work: a ranking run does it while PostgreSQL
        stores the queue)."""
        versions: dict[str, int] = {"": 0}
        envs: dict[str, int] = {"": 0}
        services: dict[tuple[str, str], int] = {("", ""): 0}
        columns: list[list[np.ndarray[Any, Any]]] = [[], [], [], []]
        held = held_of(findings)  # the rank is not read
        for start in range(0, len(held), part):
            chunk = held[start : start + part]
            n = len(chunk)
            records = list(map(itemgetter(_RECORD), chunk))
            env = _codes(map(_record_env, records), envs, n)
            service = np.zeros(n, dtype=np.int32)
            # Only non-vulnerability findings name an environment: few places.
            for i in np.flatnonzero(env).tolist():
                f = records[i]
                service[i] = services.setdefault((f.environment, f.service), len(services))
            for k, values in enumerate((
                _codes(map(_record_version, records), versions, n),
                _codes(map(itemgetter(3), map(itemgetter(_CONTEXT), chunk)), versions, n),
                env, service,
            )):
                columns[k].append(values)
            yield None
        record_version, context_version, env, service = (
            np.concatenate(c) if c else np.zeros(0, dtype=np.int32) for c in columns)
        yield cls(versions, envs, services, record_version, context_version, env, service)

    def release(self) -> list[np.ndarray[Any, Any]]:
        """Its code arrays that nothing else holds (`buffers.detach`); the index is empty
        after."""
        return detach(self, ("record_version", "context_version", "env", "service"))

    def places(self, findings: Sequence[RankedFinding]) -> dict[str, int]:
        """Finding id -> place in `findings` (the queue this index is of)."""
        if self.place is None:
            held = held_of(findings)
            self.place = dict(zip(map(itemgetter(_ID), held), range(len(held)), strict=True))
        return self.place

    def places_depending_on(
        self, *, versions: Collection[str], envs: Collection[str],
        services: Collection[tuple[str, str]],
    ) -> np.ndarray[Any, Any]:
        """Places whose finding's record or context names one of `versions`, or whose
        finding names one of `envs` or `services` (sorted)."""
        mask = np.zeros(len(self.env), dtype=bool)
        codes = [self.versions[v] for v in versions if v in self.versions]
        if codes:
            mask |= np.isin(self.record_version, codes)
            mask |= np.isin(self.context_version, codes)
        codes = [self.envs[e] for e in envs if e in self.envs and e]
        if codes:
            mask |= np.isin(self.env, codes)
        codes = [self.services[s] for s in services if s in self.services]
        if codes:
            mask |= np.isin(self.service, codes)
        return np.flatnonzero(mask)

    def codes_of(self, r: RankedFinding) -> tuple[int, int, int, int]:
        f = r.finding
        v, e = self.versions, self.envs
        a = v.setdefault(f.project_version, len(v))
        b = v.setdefault(r.project_version, len(v))
        c = e.setdefault(f.environment, len(e))
        d = self.services.setdefault((f.environment, f.service), len(self.services)) if (
            f.environment) else 0
        return a, b, c, d

    def moved(
        self, previous: Sequence[RankedFinding], findings: Sequence[RankedFinding],
        source: np.ndarray[Any, Any], fresh_codes: list[tuple[int, int, int, int]],
        changed: Sequence[int], removed: Sequence[int],
    ) -> QueueIndex:
        """The index of `findings`, place k being `previous`'s place `source[k]` (-1 for
        fresh findings, whose codes are `fresh_codes` in order)."""
        is_fresh = np.flatnonzero(source < 0) if fresh_codes else None
        arrays = []
        for k, old in enumerate((self.record_version, self.context_version, self.env,
                                 self.service)):
            # Fresh places (-1) read place 0 as a placeholder (clipped: no array of the
            # places made for it), then get their own codes. An empty previous queue has
            # no place 0: every place of the new one is fresh.
            values = BUFFERS.empty(len(source), old.dtype)
            if len(old):
                np.take(old, source, out=values, mode="clip")
            else:
                values.fill(0)
            if is_fresh is not None:
                values[is_fresh] = [c[k] for c in fresh_codes]
            arrays.append(values)
        place = None
        if self.place is not None:
            place = dict(self.place)
            before, now = held_of(previous), held_of(findings)
            for i in removed:
                del place[before[i].finding_id]
            for i in changed:
                place[now[i].finding_id] = i
        record_version, context_version, env, service = arrays
        return QueueIndex(self.versions, self.envs, self.services, record_version,
                          context_version, env, service, place)


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


def _sources(pieces: list[tuple[int, int]]) -> tuple[np.ndarray[Any, Any], PlaceRanges,
                                                     KeptPieces]:
    """Each place of a queue made of `pieces` (old place of its first finding or -1 for
    fresh ones, length): the old place of its finding, -1 for a fresh one (int32, as
    `Moves` keeps it); the places whose finding is not the one the previous queue had
    there (ascending); and the pieces of kept findings. Made in place, a piece at a time:
    at ten million places each array made beside the result (numpy's repeat of the
    pieces' starts, lengths and offsets) cost ~0.1 s, most of it the kernel handing out
    its pages."""
    n = sum(length for _start, length in pieces)
    source = np.arange(n, dtype=np.int32)
    # A piece's places changed unless its findings kept their places (fresh ones never do).
    moved: list[tuple[int, int]] = []
    kept: list[tuple[int, int, int]] = []
    at = 0
    for start, length in pieces:
        if start < 0:
            source[at : at + length] = -1
        else:
            kept.append((start, at, length))
            if start != at:
                source[at : at + length] += start - at
        if start != at:
            if moved and moved[-1][1] == at:
                moved[-1] = (moved[-1][0], at + length)
            else:
                moved.append((at, at + length))
        at += length
    return source, PlaceRanges(moved), KeptPieces.of(kept)


@dataclass(frozen=True)
class Moves:
    """Where the findings of a merged queue were: `source[k]` is the previous queue's
    place of the finding at place k, -1 for a rescored or new one (4 bytes a place);
    `previous` is the previous queue's length; `kept` the runs of kept findings. A store
    that holds the previous queue's rows by place makes the new rows of the kept findings
    from them (`RankResult.moves`), and finds a finding's row among them from where its
    row was (`kept`)."""

    source: np.ndarray[Any, Any]
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

    out: list[RankedFinding] = []
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
            out.append(r)
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
            out.extend(held[old : old + b - a])
            pieces.append((old, b - a))
            a = b
    emit_fresh(n_kept)
    findings = RankedQueue(out)
    source, changed, kept = _sources(pieces)
    moved = index.moved(previous, findings, source, fresh_codes, changed, removed)
    return Merged(findings, changed, moved, Moves(source, len(previous), kept))
