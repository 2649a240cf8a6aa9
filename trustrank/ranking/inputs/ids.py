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

    __slots__ = ("groups", "pks")

    def __init__(self, pks: Iterable[int] | np.ndarray[Any, Any],
                 groups: Iterable[int] | np.ndarray[Any, Any] | None = None) -> None:
        """`groups`, when given: each finding's component search group, in the order of
        `pks` (kept aligned with the sorted ids: `groups_of`)."""
        values = np.asarray(pks if isinstance(pks, np.ndarray) else list(pks), dtype=np.int64)
        self.groups: np.ndarray[Any, Any] | None = None
        if groups is None:
            # Not np.unique: with numpy 2.3 and later it is 20 times slower on distinct ids
            # (trustrank/risk/distinct.py).
            self.pks = sorted_distinct(values)
            return
        kept = np.asarray(groups if isinstance(groups, np.ndarray) else list(groups),
                          dtype=np.int64)
        if len(values) != len(kept):
            raise ValueError(f"{len(values)} ids but {len(kept)} search groups")
        if len(values) > 1 and not (values[1:] > values[:-1]).all():
            order = np.argsort(values, kind="stable")
            values, kept = values[order], kept[order]
            first = np.ones(len(values), dtype=bool)
            np.not_equal(values[1:], values[:-1], out=first[1:])
            values, kept = values[first], kept[first]
        self.pks, self.groups = values.copy(), kept.copy()

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

    def updated(self, *, closed: Iterable[str], read: Iterable[int],
                read_groups: Iterable[int] | None = None) -> FindingIds:
        """These less the findings `closed` (finding ids), with the database ids `read`
        (and, when both these and `read_groups` have them, their search groups)."""
        gone = np.asarray([int(f) for f in closed], dtype=np.int64)
        add = np.asarray(list(read) if not isinstance(read, np.ndarray) else read,
                         dtype=np.int64)
        out = FindingIds.__new__(FindingIds)
        out.groups = None
        if self.groups is None or read_groups is None:
            out.pks = sorted_updated(self.pks, remove=gone, add=add)
            return out
        # The ids as `sorted_updated` makes them, each group moved with its id.
        fresh = FindingIds(add, groups=read_groups)
        pks, groups = self.pks, self.groups
        gone = sorted_distinct(gone)
        if len(gone):
            at = np.searchsorted(pks, gone)
            at = at[at < len(pks)]
            at = at[pks[at] == gone[: len(at)]]
            pks, groups = np.delete(pks, at), np.delete(groups, at)
        if len(fresh.pks):
            assert fresh.groups is not None
            at = np.searchsorted(pks, fresh.pks)
            present = np.zeros(len(at), dtype=bool)
            inside = at < len(pks)
            present[inside] = pks[at[inside]] == fresh.pks[inside]
            groups = groups.copy() if groups is self.groups else groups
            groups[at[present]] = fresh.groups[present]
            pks = np.insert(pks, at[~present], fresh.pks[~present])
            groups = np.insert(groups, at[~present], fresh.groups[~present])
        out.pks = pks if pks is not self.pks else pks.copy()
        out.groups = groups if groups is not self.groups else groups.copy()
        return out

    def groups_of(self, pks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        """The search group of each of the database ids `pks` (each one of these); None
        when these findings were read without groups, or one of `pks` is not here."""
        if self.groups is None:
            return None
        at = np.searchsorted(self.pks, pks)
        if len(at) and (at.max() >= len(self.pks) or (self.pks[at] != pks).any()):
            return None
        return self.groups[at]


def search_groups_of(ids: Mapping[str, int],
                     pks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """The search group of each of the database ids `pks` (each one of `ids`), when `ids`
    were read with them (`FindingIds.groups_of`), else None."""
    return ids.groups_of(pks) if isinstance(ids, FindingIds) else None


def pk_of(ids: Mapping[str, int]) -> Callable[[str], int]:
    """The database id of a finding id that is one of `ids`: with `FindingIds`, the id read
    as a number (`int`, in C, where a lookup through the mapping is a Python call each:
    seconds at a million)."""
    return int if isinstance(ids, FindingIds) else ids.__getitem__


def finding_pks(ids: Mapping[str, int], fids: Iterable[str], n: int) -> np.ndarray[Any, Any]:
    """The database ids of `n` findings `fids`, each one of `ids` (`pk_of`)."""
    return np.fromiter(map(pk_of(ids), fids), dtype=np.int64, count=n)


def int_array(ids: Iterable[int]) -> str:
    """A PostgreSQL array literal of integers, for a `%s::bigint[]` parameter: the driver
    adapts a Python list of integers element by element (20,000 deployed versions' ids
    were 19 ms of each ranking run, the literal 2 ms)."""
    return "{" + ",".join(map(str, ids)) + "}"
