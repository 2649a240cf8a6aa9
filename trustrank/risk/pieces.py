"""A queue held as pieces of the sequences earlier runs made, not copied into a new list.

An incremental run at ten million findings that rescored five hundred made its queue as a
new list of ten million pointers: slicing the kept runs out of the previous queue and
extending the new list with them touched every ranked finding twice (each pointer's
reference count), 0.46 s of a 1.3 s run, and dropping the previous list touched them all
again. `Pieces` holds the new queue as runs of the previous one's sequences instead: a
kept run is a (sequence, start, length) entry, found in the previous queue's own pieces, so
the sequences it points into are always flat (a full run's tuple, or a run's list of the
findings it scored); a merge costs a few entries per changed place. Past `MAX_PIECES`
entries the queue is copied into one list again (a run then pays the copy once).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any, overload

# Entries past which a merged queue is made one list again: each run adds about two per
# place it changed (a run of five hundred rescored findings, a thousand), and a lookup
# bisects them (seventeen steps at this bound).
MAX_PIECES = 1 << 17


class Pieces(Sequence[Any]):
    """Entry i is `bases[i][starts[i] : starts[i] + length]`, its places ending before
    `ends[i]` (ascending). Read-only once built (`PiecesBuilder`)."""

    __slots__ = ("bases", "ends", "starts")

    def __init__(self, bases: list[Any], starts: list[int], ends: list[int]) -> None:
        self.bases, self.starts, self.ends = bases, starts, ends

    @classmethod
    def of(cls, items: Any) -> Pieces:
        """`items` (a sequence, or anything of a length whose places `runs` names) as
        pieces (itself when it is)."""
        if isinstance(items, Pieces):
            return items
        return cls([items], [0], [len(items)]) if len(items) else cls([], [], [])

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    @overload
    def __getitem__(self, k: int) -> Any: ...

    @overload
    def __getitem__(self, k: slice) -> list[Any]: ...

    def __getitem__(self, k: int | slice) -> Any:
        n = len(self)
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            out: list[Any] = []
            for base, at, length in self.runs(start, stop):
                out.extend(base[at : at + length])
            return out
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("pieces index out of range")
        i = bisect_right(self.ends, k)
        return self.bases[i][self.starts[i] + k - (self.ends[i - 1] if i else 0)]

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(
            map(base.__getitem__, range(at, at + length))
            for base, at, length in self.runs(0, len(self)))

    def runs(self, start: int, stop: int) -> Iterator[tuple[Any, int, int]]:
        """The places [start, stop) as (sequence, start in it, length), in order."""
        i = bisect_right(self.ends, start)
        at = start
        while at < stop:
            first = self.ends[i - 1] if i else 0
            length = min(stop, self.ends[i]) - at
            yield self.bases[i], self.starts[i] + at - first, length
            at += length
            i += 1

    def __repr__(self) -> str:
        return f"Pieces({len(self)} items in {len(self.ends)} pieces)"


class PiecesBuilder:
    """Pieces added in order; a piece that continues the last one in the same sequence
    extends it (a place rescored in one run and again in the next rejoins its
    neighbours)."""

    __slots__ = ("bases", "ends", "starts")

    def __init__(self) -> None:
        self.bases: list[Any] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def add(self, base: Any, start: int, length: int) -> None:
        if length <= 0:
            return
        ends = self.ends
        if ends:
            last = len(ends) - 1
            if (self.bases[last] is base
                    and self.starts[last] + ends[last] - (ends[last - 1] if last else 0)
                    == start):
                ends[last] += length
                return
        self.bases.append(base)
        self.starts.append(start)
        ends.append((ends[-1] if ends else 0) + length)

    def add_from(self, pieces: Pieces, start: int, length: int) -> None:
        """The places [start, start + length) of `pieces`."""
        for base, at, n in pieces.runs(start, start + length):
            self.add(base, at, n)

    def build(self, join: Callable[[Pieces], Any] | None = None) -> Any:
        """The pieces; made one sequence by `join` (default: a list of the items) when
        they are more than `MAX_PIECES`; the sequence itself when one piece is a whole
        sequence."""
        if len(self.ends) == 1 and self.starts[0] == 0 and len(self.bases[0]) == self.ends[0]:
            return self.bases[0]
        pieces = Pieces(self.bases, self.starts, self.ends)
        if len(self.ends) > MAX_PIECES:
            return join(pieces) if join is not None else pieces[:]
        return pieces
