"""Arrays of a queue's length handed from one incremental run to a later one.

An incremental run at ten million findings makes about eight arrays of the queue's length
(the stored rows' columns, their environment ranks), and the previous run's equal ones
are dropped when it ends. Each new array is memory the kernel has to hand out again: on a
machine whose memory is mostly page cache, a fresh 40 MB array cost 0.03 s when huge
pages were at hand and up to 0.16 s when the kernel first had to compact memory for them
(a take into a reused array: 0.025 s), so the same run's store took 1.4 s or 2.8 s by
what the kernel had at hand. The arrays of a run's previous rows, once a newer run
replaced them and nothing else holds them, wait here for the next run's; after a full
run, those it leaves the first incremental run (`prepare`).

A full run drops what is held (`clear`): its own peak is the process's highest, and the
arrays of an incremental queue would only add to it. The pool holds at most `_KEEP`
arrays, all of one length (`give`)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# Arrays kept in all: a run gives about eight (its previous rows' columns) and takes as
# many.
_KEEP = 16


class ArrayPool:
    def __init__(self) -> None:
        self._free: dict[tuple[int, np.dtype[Any]], list[np.ndarray[Any, Any]]] = {}

    def empty(self, n: int, dtype: Any) -> np.ndarray[Any, Any]:
        """An array of `n` values of `dtype`, its values whatever they were: a kept one, or
        a new one."""
        held = self._free.get((n, np.dtype(dtype)))
        return held.pop() if held else np.empty(n, dtype=dtype)

    def give(self, arrays: list[np.ndarray[Any, Any]]) -> None:
        """Keep `arrays` for later runs. Only arrays of one length are kept, the length
        given last: a run asks for its queue's length, which is the previous run's of the
        same team when no finding came or went. Arrays of a length no run asks for again
        (another team's, or a queue that since grew) would otherwise pile up in a worker
        that ranks many teams."""
        for a in arrays:
            if any(n != len(a) for n, _dtype in self._free):
                self._free.clear()
            if self.held() < _KEEP:
                self._free.setdefault((len(a), a.dtype), []).append(a)

    def prepare(self, n: int, dtypes: list[np.dtype[Any]]) -> None:
        """Hold an array of `n` values of each of `dtypes` (as many of a dtype as it is
        listed), making those missing and writing each once, so that a later run's use
        does not wait for the kernel to hand out their pages."""
        wanted: dict[np.dtype[Any], int] = {}
        for dtype in dtypes:
            wanted[dtype] = wanted.get(dtype, 0) + 1
        made = []
        for dtype, count in wanted.items():
            for _ in range(count - len(self._free.get((n, dtype), ()))):
                a = np.empty(n, dtype=dtype)
                a.fill(0)
                made.append(a)
        self.give(made)

    def clear(self) -> None:
        self._free.clear()

    def held(self) -> int:
        return sum(map(len, self._free.values()))


def detach(holder: Any, names: tuple[str, ...]) -> list[np.ndarray[Any, Any]]:
    """Take the arrays `names` from `holder`, leaving each name an empty array (the holder
    then holds nothing: it must not be read again), and return those nothing else holds
    (a view of one, or another object naming it, keeps it out: it could be read again).
    Only whole one-dimensional arrays that own their memory are returned."""
    out = []
    for name in names:
        a = getattr(holder, name)
        # Past a frozen dataclass's guard too: the holder is being let go.
        object.__setattr__(holder, name, np.zeros(0, dtype=a.dtype))
        # Two references: `a` and the call's own argument.
        if a.ndim == 1 and a.flags.owndata and a.base is None and sys.getrefcount(a) == 2:
            out.append(a)
        del a
    return out


# One per worker process, as the previous runs are (`ranking.services.runs`).
BUFFERS = ArrayPool()

_ASCENDING = np.zeros(0, dtype=np.int32)


def ascending(n: int) -> np.ndarray[Any, Any]:
    """1, 2, … `n` (int32): a read-only view of one array the worker keeps, made again
    only when a longer one is asked. A queue's ranks by place, which an incremental run
    made anew each run (40 MB at ten million, up to 0.1 s of the kernel's pages)."""
    global _ASCENDING
    if len(_ASCENDING) < n:
        _ASCENDING = np.arange(1, n + 1, dtype=np.int32)
        _ASCENDING.flags.writeable = False
    return _ASCENDING[:n]
