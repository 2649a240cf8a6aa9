"""Where each finding id's row is in a queue's rows (`QueueRows.places`), without sorting
the queue's ids again in every run.

The rows of the first queue are looked up in a sorted copy of their ids (`SortedIds`).
An incremental run's rows are the previous rows moved in runs plus a few fresh ones
(`store_moved`): a finding's row is then where its previous row went, unless it is one of
the fresh ones (`MovedIds`). Sorting the ten million ids of each new queue was 0.3-0.5 s
of an incremental run at ten million (1.6 s where the ids are in no order at all); a
lookup through the runs costs a search among a few runs per change. After `MAX_DEPTH`
runs in a row the ids are sorted again, so a lookup never goes through more than that
many steps."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from trustrank.risk.queue_moves import KeptPieces

MAX_DEPTH = 32


class Located(Protocol):
    depth: int

    def places(self, fids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The index of each id's row (int64), -1 for an id without one."""


class SortedIds:
    """Rows' ids looked up in a sorted copy of them (16 bytes a row)."""

    depth = 0

    def __init__(self, fid: np.ndarray[Any, Any]) -> None:
        self.sorter = np.argsort(fid, kind="stable")
        self.sorted = fid[self.sorter]

    def places(self, fids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if not len(self.sorted):
            return np.full(len(fids), -1, dtype=np.int64)
        at = np.searchsorted(self.sorted, fids)
        # In place where it can be: asked of a whole queue, each temporary array is 8 MB a
        # million, made while the run's other large structures are alive.
        np.minimum(at, len(self.sorted) - 1, out=at)
        missing = self.sorted[at] != fids
        found = self.sorter[at]
        del at
        found[missing] = -1
        return found.astype(np.int64, copy=False)


class MovedIds:
    """Ids of rows made from earlier rows (located by `parent`): a kept row's index is its
    earlier index moved with its run (`kept`); the `fresh` ids (rows made anew) are at
    `fresh_at`. An id that is neither had its row dropped."""

    def __init__(self, parent: Located, kept: KeptPieces, fresh: np.ndarray[Any, Any],
                 fresh_at: np.ndarray[Any, Any]) -> None:
        self.parent, self.kept = parent, kept
        self.depth = parent.depth + 1
        order = np.argsort(fresh, kind="stable")
        self.fresh = np.asarray(fresh, dtype=np.int64)[order]
        self.fresh_at = np.asarray(fresh_at, dtype=np.int64)[order]

    def places(self, fids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        found = self.kept.moved(self.parent.places(fids))
        if len(self.fresh):
            at = np.searchsorted(self.fresh, fids)
            np.minimum(at, len(self.fresh) - 1, out=at)
            hit = self.fresh[at] == fids
            found[hit] = self.fresh_at[at[hit]]
        return found


def moved_ids(parent: Located | None, kept: KeptPieces, fresh: list[int] | np.ndarray[Any, Any],
              fresh_at: list[int] | np.ndarray[Any, Any]) -> MovedIds | None:
    """`MovedIds` over `parent`, or None (the rows then sort their ids when first asked)
    when there is no parent or the chain is long enough to sort again."""
    if parent is None or parent.depth >= MAX_DEPTH:
        return None
    return MovedIds(parent, kept, np.asarray(fresh, dtype=np.int64),
                    np.asarray(fresh_at, dtype=np.int64))
