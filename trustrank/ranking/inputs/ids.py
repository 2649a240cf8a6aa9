"""The database ids of a gather's open findings (`FindingIds`).

A finding's id in the engine's records is its database id as text (`findings_read`), so
the map from one to the other needs no dictionary: a dictionary of a million (and the int
object of each id) was 68 bytes a finding, kept with the inputs for the next run. The
ids are kept sorted in an array (8 bytes a finding) for membership; the id itself is the
text read as a number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from trustrank.risk.distinct import sorted_distinct, sorted_updated


class FindingIds(Mapping[str, int]):
    """Finding id (the database id as text) -> database id, for the findings `pks`."""

    __slots__ = ("pks",)

    def __init__(self, pks: Iterable[int] | np.ndarray[Any, Any]) -> None:
        # Not np.unique: with numpy 2.3 and later it is 20 times slower on distinct ids
        # (trustrank/risk/distinct.py).
        self.pks = sorted_distinct(np.asarray(
            pks if isinstance(pks, np.ndarray) else list(pks), dtype=np.int64))

    @classmethod
    def of(cls, ids: Mapping[str, int]) -> FindingIds:
        """`ids` as `FindingIds` (as they are when they already are)."""
        return ids if isinstance(ids, FindingIds) else cls(ids.values())

    def pk(self, fid: str) -> int | None:
        """The database id of `fid`, None when it is not one of these findings."""
        try:
            pk = int(fid)
        except (TypeError, ValueError):
            return None
        if str(pk) != fid:  # not the text of a database id (" 7", "07", "+7")
            return None
        at = int(np.searchsorted(self.pks, pk))
        return pk if at < len(self.pks) and self.pks[at] == pk else None

    def __getitem__(self, fid: str) -> int:
        pk = self.pk(fid)
        if pk is None:
            raise KeyError(fid)
        return pk

    def __contains__(self, fid: object) -> bool:
        return isinstance(fid, str) and self.pk(fid) is not None

    def __iter__(self) -> Iterator[str]:
        return map(str, self.pks.tolist())

    def __len__(self) -> int:
        return len(self.pks)

    def updated(self, *, closed: Iterable[str], read: Iterable[int]) -> FindingIds:
        """These less the findings `closed` (finding ids), with the database ids `read`."""
        gone = np.asarray([int(f) for f in closed], dtype=np.int64)
        out = FindingIds.__new__(FindingIds)
        out.pks = sorted_updated(self.pks, remove=gone,
                                 add=np.asarray(list(read), dtype=np.int64))
        return out


def pk_of(ids: Mapping[str, int]) -> Callable[[str], int]:
    """The database id of a finding id that is one of `ids`: with `FindingIds`, the id read
    as a number (`int`, in C, where a lookup through the mapping is a Python call each:
    seconds at a million)."""
    return int if isinstance(ids, FindingIds) else ids.__getitem__


def finding_pks(ids: Mapping[str, int], fids: Iterable[str], n: int) -> np.ndarray[Any, Any]:
    """The database ids of `n` findings `fids`, each one of `ids` (`pk_of`)."""
    return np.fromiter(map(pk_of(ids), fids), dtype=np.int64, count=n)
