"""What each finding of a queue depends on, as small integer codes, found by array
operations (`QueueIndex`).

Per finding: its project version, its context's project version, its environment and
service (for non-vulnerability findings). The codes are kept per sequence of ranked
findings (`Codes`: a full run's queue, a merge's fresh findings), by place in that
sequence, and the index lays them out as the queue holds those sequences
(`pieces.Pieces`). A merged queue's index is the previous one's layout in the merged
order: no array of the queue's length is made per run (at ten million findings, four
takes of forty megabytes, 0.23 s of a 1.3 s run).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from trustrank.risk.pieces import Pieces, PiecesBuilder
from trustrank.risk.ranked_queue import held_of
from trustrank.risk.results import RankedFinding

# RankedFinding fields by position: 0 finding_id, 5 context (3: its project version),
# 6 finding.
_ID, _CONTEXT, _RECORD = 0, 5, 6
_COLUMNS = ("record_version", "context_version", "env", "service")

_record_version = attrgetter("project_version")
_record_env = attrgetter("environment")


def _codes(values: Sequence[Any] | Any, table: dict[Any, int], count: int) -> np.ndarray[Any, Any]:
    """`values` as codes of `table` (new values get new codes; code 0 is the empty string)."""
    values = list(values)
    for value in set(values) - table.keys():
        table[value] = len(table)
    return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=count)


@dataclass(frozen=True, eq=False)
class Codes:
    """The codes of a sequence of ranked findings, by place in it (int32 each)."""

    record_version: np.ndarray[Any, Any]
    context_version: np.ndarray[Any, Any]
    env: np.ndarray[Any, Any]
    service: np.ndarray[Any, Any]

    def __len__(self) -> int:
        return len(self.env)

    @classmethod
    def of_rows(cls, rows: Sequence[tuple[int, int, int, int]]) -> Codes:
        table = np.array(rows, dtype=np.int32).reshape(-1, 4)
        return cls(*(np.ascontiguousarray(table[:, k]) for k in range(4)))

    def matching(self, wanted: list[tuple[str, list[int]]]) -> np.ndarray[Any, Any]:
        """Places (ascending) whose code in a named column is one of its codes."""
        mask = np.zeros(len(self), dtype=bool)
        for name, codes in wanted:
            mask |= np.isin(getattr(self, name), codes)
        return np.flatnonzero(mask)


@dataclass
class QueueIndex:
    """Codes per place of one queue (`layout`: pieces of `Codes`, place k of the queue
    being place k of the layout), and each finding id's place."""

    versions: dict[str, int]
    envs: dict[str, int]
    services: dict[tuple[str, str], int]
    layout: Pieces
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
        codes = Codes(*(
            np.concatenate(c) if c else np.zeros(0, dtype=np.int32) for c in columns))
        yield cls(versions, envs, services, Pieces.of(codes))

    def column(self, name: str) -> np.ndarray[Any, Any]:
        """One column's code of every place, in queue order (made on each call)."""
        parts = [getattr(codes, name)[at : at + n]
                 for codes, at, n in self.layout.runs(0, len(self.layout))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    @property
    def record_version(self) -> np.ndarray[Any, Any]:
        return self.column("record_version")

    @property
    def context_version(self) -> np.ndarray[Any, Any]:
        return self.column("context_version")

    @property
    def env(self) -> np.ndarray[Any, Any]:
        return self.column("env")

    @property
    def service(self) -> np.ndarray[Any, Any]:
        return self.column("service")

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
        wanted: list[tuple[str, list[int]]] = []
        codes = [self.versions[v] for v in versions if v in self.versions]
        if codes:
            wanted += [("record_version", codes), ("context_version", codes)]
        codes = [self.envs[e] for e in envs if e in self.envs and e]
        if codes:
            wanted.append(("env", codes))
        codes = [self.services[s] for s in services if s in self.services]
        if codes:
            wanted.append(("service", codes))
        if not wanted:
            return np.zeros(0, dtype=np.intp)
        # Each sequence's matching places, then their places in the queue: the pieces of
        # one sequence never overlap, so a match is in at most one piece.
        layout = self.layout
        by_codes: dict[int, tuple[Codes, list[int], list[int], list[int]]] = {}
        first = 0
        for codes_of, at, end in zip(layout.bases, layout.starts, layout.ends, strict=True):
            entry = by_codes.setdefault(id(codes_of), (codes_of, [], [], []))
            entry[1].append(at)
            entry[2].append(end - first)
            entry[3].append(first)
            first = end
        found = []
        for codes_of, starts, lengths, firsts in by_codes.values():
            hits = codes_of.matching(wanted)
            if not len(hits):
                continue
            start, length, place = (np.array(v, dtype=np.int64) for v in (
                starts, lengths, firsts))
            order = np.argsort(start, kind="stable")
            start, length, place = start[order], length[order], place[order]
            piece = np.searchsorted(start, hits, side="right") - 1
            inside = piece >= 0
            inside[inside] = hits[inside] < start[piece[inside]] + length[piece[inside]]
            piece, hits = piece[inside], hits[inside]
            found.append(place[piece] + hits - start[piece])
        return np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.intp)

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
        pieces: Sequence[tuple[int, int]], fresh_codes: Sequence[tuple[int, int, int, int]],
        changed: Iterable[int], removed: Sequence[int],
    ) -> QueueIndex:
        """The index of `findings`, made of `pieces` of `previous` (the previous place of a
        piece's first finding, or -1 for fresh findings, whose codes are `fresh_codes` in
        order; its length)."""
        fresh = Codes.of_rows(fresh_codes)
        out = PiecesBuilder()
        at = 0
        for old, length in pieces:
            if old < 0:
                out.add(fresh, at, length)
                at += length
            else:
                out.add_from(self.layout, old, length)
        # Past the bound, one sequence of codes again.
        layout = Pieces.of(out.build(join=lambda laid: Codes(*map(
            QueueIndex(self.versions, self.envs, self.services, laid).column, _COLUMNS))))
        place = None
        if self.place is not None:
            place = dict(self.place)
            before, now = held_of(previous), held_of(findings)
            for i in removed:
                del place[before[i].finding_id]
            for i in changed:
                place[now[i].finding_id] = i
        return QueueIndex(self.versions, self.envs, self.services, layout, place)
