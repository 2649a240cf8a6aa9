"""How a merged queue's places relate to the previous queue's (`queue.merge`): the places
whose finding moved, as ranges, and the runs of findings it kept."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class PlaceRanges(Sequence[int]):
    """Ascending places given as half-open ranges `(start, end)`, ascending and apart:
    the places of a merged queue whose finding moved. One finding rising renumbers every
    place below it; listed, those were ten million integers made each run (an `arange`,
    its bytes, an array of them: 0.3 s at ten million) for a caller that mostly asks how
    many there are. Listed on first index (the store's walk reads them by index when they
    are few)."""

    __slots__ = ("_len", "_listed", "ranges")

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges
        self._len = sum(b - a for a, b in ranges)
        self._listed: array[int] | None = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b)

    def __getitem__(self, k: Any) -> Any:
        if self._listed is None:
            self._listed = array("q")
            for a, b in self.ranges:
                self._listed.frombytes(np.arange(a, b, dtype=np.int64).tobytes())
        return self._listed[k]


@dataclass(frozen=True)
class KeptPieces:
    """The runs of findings a merged queue kept from the previous one, in order (the
    previous places ascend with the new ones): run k is the previous places
    `old[k]` … `old[k] + length[k] - 1`, now at `new[k]` onward. A kept finding's new
    place follows from its previous one by a search among the runs (a few per change),
    with no array of the queue's size."""

    old: np.ndarray[Any, Any]
    new: np.ndarray[Any, Any]
    length: np.ndarray[Any, Any]

    @classmethod
    def of(cls, runs: Sequence[tuple[int, int, int]]) -> KeptPieces:
        """From (old start, new start, length) runs, ascending."""
        a = np.array(runs, dtype=np.int64).reshape(-1, 3)
        return cls(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy())

    def dropped(self, n: int) -> np.ndarray[Any, Any]:
        """The previous places (of `n`) in no run: those whose finding was rescored or
        left the queue."""
        ends = self.old + self.length
        starts = [0, *ends.tolist()]
        stops = [*self.old.tolist(), n]
        return np.concatenate([np.zeros(0, dtype=np.int64), *(
            np.arange(a, b, dtype=np.int64) for a, b in zip(starts, stops, strict=True)
            if b > a)])

    def moved(self, old: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The new place of each previous place in `old`, -1 for one not kept (or -1)."""
        k = np.searchsorted(self.old, old, side="right") - 1
        np.maximum(k, 0, out=k)
        if not len(self.old):
            return np.full(len(old), -1, dtype=np.int64)
        offset = old - self.old[k]
        inside = (old >= 0) & (offset >= 0) & (offset < self.length[k])
        return np.where(inside, self.new[k] + offset, -1)
