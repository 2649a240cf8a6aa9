"""The decisions a full gather found each open finding's due date settled for, as two arrays:
a dict of ten million findings (an int and an entry each) was 600 MB held through the
whole run, where it is 90 MB here, and a run looks them up by numpy, not one by one."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from trustrank.risk.inputs import DECISIONS

_CODE: dict[str, int] = {d: i for i, d in enumerate(DECISIONS)}


class SettledDecisions(Mapping[int, str]):
    """Finding database id -> the decision its due date is settled for. Filled by `note`
    (ids in any order, each once), read once filled."""

    def __init__(self) -> None:
        self._ids, self._codes = array("q"), array("b")
        self._sorted: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
        # Decisions not in `DECISIONS` (a row written under other names), coded after them:
        # settled, and never equal to a ranked decision.
        self._others: dict[str, int] = {}

    def note(self, fid: int, decision: str) -> None:
        code = _CODE.get(decision)
        if code is None:
            code = self._others.setdefault(decision, len(DECISIONS) + len(self._others))
        self._ids.append(fid)
        self._codes.append(code)
        self._sorted = None

    __setitem__ = note

    def _arrays(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        if self._sorted is None:
            ids = np.frombuffer(self._ids, dtype=np.int64) if self._ids else np.zeros(
                0, dtype=np.int64)
            codes = np.frombuffer(self._codes, dtype=np.int8) if self._codes else np.zeros(
                0, dtype=np.int8)
            order = np.argsort(ids, kind="stable")
            self._sorted = (ids[order], codes[order])
        return self._sorted

    def codes_of(self, fids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The index in `DECISIONS` of each finding's settled decision, -1 where none."""
        ids, codes = self._arrays()
        fids = np.asarray(fids, dtype=np.int64)
        if not len(ids):
            return np.full(len(fids), -1, dtype=np.int8)
        at = np.minimum(np.searchsorted(ids, fids), len(ids) - 1)
        return np.where(ids[at] == fids, codes[at], np.int8(-1))

    def has(self, fids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Whether each finding's due date is settled for a decision."""
        return self.codes_of(fids) >= 0

    def __getitem__(self, fid: int) -> str:
        code = int(self.codes_of(np.array([fid]))[0])
        if code < 0:
            raise KeyError(fid)
        if code < len(DECISIONS):
            return DECISIONS[code]
        return next(name for name, c in self._others.items() if c == code)

    def __contains__(self, fid: object) -> bool:
        return isinstance(fid, int) and bool(self.has(np.array([fid]))[0])

    def __iter__(self) -> Iterator[int]:
        return iter(self._arrays()[0].tolist())

    def __len__(self) -> int:
        return len(self._ids)
