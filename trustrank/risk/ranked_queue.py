"""A merged queue whose ranks are its places, read as they are asked for.

One finding rising renumbers every place below it. An incremental run at ten million
findings made a new ranked tuple for each of ~9.9 million renumbered places (15 of a
profiled 32 s), and the previous queue's were then dropped (2 s more). `RankedQueue` holds
the kept findings' very tuples instead, whose `rank` is the place they held when they were
made, and gives each with this queue's rank (its place plus one) when it is read: what a run
reads (the rescored places, its store's few rows, a page) costs a tuple per read, and a
queue merged from this one again reuses the same tuples."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from trustrank.risk.results import RankedFinding

_new_ranked = tuple.__new__


def with_rank(r: RankedFinding, rank: int) -> RankedFinding:
    """`r` if it holds `rank`, else a copy of it that does."""
    return r if r[1] == rank else _new_ranked(RankedFinding, (r[0], rank, *r[2:]))


class RankedQueue(Sequence[RankedFinding]):
    """Ranked findings in queue order, place k read with rank k + 1, whatever rank the tuple
    held (`held`). Equal to any sequence of the same ranked findings (a tuple included)."""

    __slots__ = ("held",)

    def __init__(self, held: Sequence[RankedFinding]) -> None:
        # The merge's sequence as it made it (`pieces.Pieces` of the previous queue's
        # sequences); nothing changes it after.
        self.held = held

    def __len__(self) -> int:
        return len(self.held)

    @overload
    def __getitem__(self, k: int) -> RankedFinding: ...

    @overload
    def __getitem__(self, k: slice) -> tuple[RankedFinding, ...]: ...

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            start, stop, step = k.indices(len(self.held))
            places = range(start, stop, step)
            return tuple(map(with_rank, self.held[k], (p + 1 for p in places)))
        r = self.held[k]  # IndexError out of range, as a tuple's
        return with_rank(r, (k if k >= 0 else len(self.held) + k) + 1)

    def __iter__(self) -> Iterator[RankedFinding]:
        return map(with_rank, self.held, range(1, len(self.held) + 1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple | RankedQueue):
            return len(self) == len(other) and all(map(tuple.__eq__, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RankedQueue({len(self.held)} ranked findings)"


def held_of(findings: Sequence[RankedFinding]) -> Sequence[RankedFinding]:
    """The tuples a queue holds (their ranks may be stale: use for what is not the rank)."""
    return findings.held if isinstance(findings, RankedQueue) else findings
