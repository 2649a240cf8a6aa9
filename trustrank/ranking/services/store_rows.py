"""The rows of a stored queue as columns (`QueueRows`): what a ranking run keeps of the
queue it stored, for the next run to compare with, update and hash.

As a dictionary (finding id -> a tuple of six) the rows were 240 bytes a finding: a
worker holds the previous run's beside the new one's while an incremental run stores,
half a gigabyte at a million findings. As columns they are 33 bytes a finding (49 once
looked up by finding id: a sorted copy of the ids and their order). A row is
made into a tuple only when one is read; the store's passes over many rows read the
columns (`places`, `compare`, `moved`).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from trustrank.ranking.services.store_places import Located, SortedIds
from trustrank.risk.buffers import BUFFERS, detach
from trustrank.risk.inputs import DECISIONS
from trustrank.risk.queue_moves import KeptPieces

# A stored rank row: (rank, env rank, environment, score, decision, context digest).
Row = tuple[int, int, str, float, str, str]

# A row's own values: (queue key, environment, score, decision, context digest). A run
# writes a row when these change; its ranks follow from the other rows' keys.
OwnRow = tuple[int, str, float, str, str]

_DECISION_INDEX: dict[str, int] = {d: i for i, d in enumerate(DECISIONS)}

# Rows made into tuples at a time by an iteration over many.
_PART = 50_000

# Finding ids: a list, or an array where they are as many as the queue's findings (a list
# of a million ints is 40 MB).
Ids = list[int] | np.ndarray[Any, Any]


def _codes(values: Iterable[str], table: dict[str, int], n: int) -> np.ndarray[Any, Any]:
    """`values` as codes of `table` (a new value gets the next code)."""
    return np.fromiter(map(table.setdefault, values, map(len, repeat(table, n))),
                       dtype=np.int32, count=n)


# fid, rank, env_rank, env, score, decision, context, qkey: the columns' types.
_DTYPES = (np.int64, np.int32, np.int32, np.int32, np.float64, np.int8, np.int32, np.int64)


def chunk_columns(chunk: Sequence[tuple[Any, ...]], envs: dict[str, int],
                  digests: dict[str, int], keyed: bool = True,
                  ) -> tuple[np.ndarray[Any, Any], ...]:
    """The eight columns (`_DTYPES`) of rows (finding id, the row's six fields[, queue key
    when `keyed`, else zeros]) as read from the table, environments and context digests as
    codes of `envs` and `digests` (a new value gets the next code)."""
    n = len(chunk)
    cols: list[np.ndarray[Any, Any]] = []
    for at, dtype in enumerate(_DTYPES):
        values = map(itemgetter(at), chunk)
        if at == 3 or at == 6:
            cols.append(_codes(values, envs if at == 3 else digests, n))
        elif at == 5:
            cols.append(np.fromiter(map(_DECISION_INDEX.__getitem__, values), dtype=dtype,
                                    count=n))
        elif at < 7 or keyed:
            cols.append(np.fromiter(values, dtype=dtype, count=n))
        else:
            cols.append(np.zeros(n, dtype=dtype))
    return tuple(cols)


def env_ranks(codes: np.ndarray[Any, Any], n_codes: int) -> np.ndarray[Any, Any]:
    """Each place's rank among the places of its environment code (`codes` by place,
    codes below `n_codes`): one pass in C per environment."""
    ranks = BUFFERS.empty(len(codes), np.int32)
    for code in range(n_codes):
        at = np.flatnonzero(codes == code)
        ranks[at] = np.arange(1, len(at) + 1)
    return ranks


# `QueueRows._key_rank` of rows by place in key order: each row's rank is its place + 1.
_BY_PLACE = np.zeros(0, dtype=np.int64)


class QueueRows(Mapping[int, Row]):
    """Finding id -> (rank, env rank, environment, score, decision, context digest), one
    row per index of the columns: `fid`, `rank`, `env_rank`, `score`, `decision` (index in
    `DECISIONS`), `env` (code in `envs`), `context` (code in `digests`; one code per
    digest) and `qkey` (the queue key, `store_keys`; not part of the row's tuple: it
    follows from the decision, score and context). `by_place`: row k is place k of the
    queue the rows were made from (as the store makes them), which the incremental store's
    walk relies on; rows read from elsewhere are looked up by finding id."""

    __slots__ = ("_context_counted", "_env_counted", "_key_rank", "_located", "by_place",
                 "context", "decision", "digests", "env", "env_rank", "envs", "fid", "qkey",
                 "rank", "score")

    def __init__(self, *, fid: np.ndarray[Any, Any], rank: np.ndarray[Any, Any],
                 env_rank: np.ndarray[Any, Any], env: np.ndarray[Any, Any],
                 score: np.ndarray[Any, Any], decision: np.ndarray[Any, Any],
                 context: np.ndarray[Any, Any], envs: list[str], digests: list[str],
                 by_place: bool = False, qkey: np.ndarray[Any, Any] | None = None,
                 key_rank: np.ndarray[Any, Any] | None = None) -> None:
        self.fid = fid.astype(np.int64, copy=False)
        self.rank = rank.astype(np.int32, copy=False)
        self.env_rank = env_rank.astype(np.int32, copy=False)
        self.env = env.astype(np.int32, copy=False)
        self.score = score.astype(np.float64, copy=False)
        self.decision = decision.astype(np.int8, copy=False)
        self.context = context.astype(np.int32, copy=False)
        self.qkey = (np.zeros(len(self.fid), dtype=np.int64) if qkey is None
                     else qkey.astype(np.int64, copy=False))
        self.envs, self.digests, self.by_place = envs, digests, by_place
        # How an id's row is found (`store_places`): made on first use unless the rows
        # were made from earlier ones, whose lookup then leads to them.
        self._located: Located | None = None
        # Each row's rank among these rows in key order (`key_ranks`), when the caller knows
        # it (rows read in key order from a longer queue: their ranks there).
        self._key_rank: np.ndarray[Any, Any] | None = (
            None if key_rank is None else key_rank.astype(np.int64, copy=False))
        self._env_counted: tuple[np.ndarray[Any, Any], dict[str, int]] | None = None
        self._context_counted: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None

    @classmethod
    def of(cls, rows: Mapping[int, Row]) -> QueueRows:
        """`rows` as columns (as they are when they already are)."""
        if isinstance(rows, QueueRows):
            return rows
        return cls.from_items(rows.items())

    @classmethod
    def from_items(cls, items: Iterable[tuple[int, Row]],
                   keyed: bool = False) -> QueueRows:
        """The columns of (finding id, row) pairs, in their order; `keyed`: each row has
        the queue key after its six fields (as read from the table)."""
        return cls.from_chunks([[(fid, *row) for fid, row in items]], keyed=keyed)

    @classmethod
    def from_chunks(cls, chunks: Iterable[Sequence[tuple[Any, ...]]],
                    keyed: bool = False) -> QueueRows:
        """The columns of rows (finding id, the row's six fields[, queue key when
        `keyed`]) given chunk by chunk, in their order: only a chunk's tuples are held at
        once (a queue read from the table: ten million rows of tuples were gigabytes)."""
        envs: dict[str, int] = {}
        digests: dict[str, int] = {}
        parts = [chunk_columns(chunk, envs, digests, keyed) for chunk in chunks]
        return cls.joined(parts, envs=list(envs), digests=list(digests), keyed=keyed)

    @classmethod
    def joined(cls, parts: Sequence[tuple[np.ndarray[Any, Any], ...]], *, envs: list[str],
               digests: list[str], keyed: bool,
               key_rank: np.ndarray[Any, Any] | None = None) -> QueueRows:
        """The rows of the columns of each part (as `chunk_columns` makes them, codes of
        `envs` and `digests`), one part after the other."""
        if not parts:
            parts = [tuple(np.zeros(0, dtype=dtype) for dtype in _DTYPES)]
        fid, rank, env_rank, env, score, decision, context, qkey = (
            np.concatenate(col) for col in zip(*parts, strict=True))
        return cls(fid=fid, rank=rank, env_rank=env_rank, env=env, score=score,
                   decision=decision, context=context, envs=envs, digests=digests,
                   qkey=qkey if keyed else None, key_rank=key_rank)

    # --- lookups ---------------------------------------------------------------------

    def places(self, fids: Sequence[int] | np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The index of each finding id's row, -1 for an id without one (`located`). The
        ids asked are looked up in order when they are many: in random order, a search
        spent most of its time waiting on memory (6 s over an incremental run at a
        million)."""
        fids = np.asarray(fids, dtype=np.int64).reshape(-1)
        if not len(self.fid):
            return np.full(len(fids), -1, dtype=np.int64)
        located = self.located()
        if len(fids) <= 64:
            return located.places(fids)
        asked = np.argsort(fids, kind="stable")
        found = located.places(fids[asked])
        out = np.empty(len(fids), dtype=np.int64)
        out[asked] = found
        return out

    def release(self) -> list[np.ndarray[Any, Any]]:
        """Its columns that nothing else holds (`buffers.detach`), for a later run's rows;
        these rows are empty after."""
        # The counts name their columns: that would keep them held.
        self._env_counted = self._context_counted = None
        return detach(self, ("fid", "rank", "env_rank", "env", "score", "decision",
                             "context", "qkey"))

    def located(self) -> Located:
        """How an id's row is found: the lookup given when the rows were made
        (`store_places.MovedIds`), else a sorted copy of the ids, made now."""
        if self._located is None:
            self._located = SortedIds(self.fid)
        return self._located

    def locate_by(self, located: Located | None) -> None:
        """Find ids' rows by `located` (None: by a sorted copy of the ids, made when first
        asked). The caller vouches that it tells the rows these columns hold."""
        self._located = located

    def place(self, fid: int) -> int | None:
        at = int(self.places([fid])[0])
        return None if at < 0 else at

    def row_at(self, at: int) -> Row:
        return (int(self.rank[at]), int(self.env_rank[at]), self.envs[self.env[at]],
                float(self.score[at]), DECISIONS[self.decision[at]],
                self.digests[self.context[at]])

    def rows_at(self, at: np.ndarray[Any, Any] | slice) -> Iterator[Row]:
        """The rows at indexes `at`, as tuples (made when read)."""
        return zip(self.rank[at].tolist(), self.env_rank[at].tolist(),
                   map(self.envs.__getitem__, self.env[at].tolist()), self.score[at].tolist(),
                   map(DECISIONS.__getitem__, self.decision[at].tolist()),
                   map(self.digests.__getitem__, self.context[at].tolist()), strict=True)

    def own_rows_at(self, at: np.ndarray[Any, Any] | slice) -> Iterator[OwnRow]:
        """The own values (`OwnRow`) of the rows at indexes `at`."""
        return zip(self.qkey[at].tolist(), map(self.envs.__getitem__, self.env[at].tolist()),
                   self.score[at].tolist(),
                   map(DECISIONS.__getitem__, self.decision[at].tolist()),
                   map(self.digests.__getitem__, self.context[at].tolist()), strict=True)

    def own_items(self, fids: Sequence[int] | np.ndarray[Any, Any] | None = None,
                  ) -> Iterator[tuple[int, OwnRow]]:
        """(finding id, own values) of each of `fids` that has a row (of every row when
        None), made a part at a time."""
        for start in range(0, len(self) if fids is None else len(fids), _PART):
            if fids is None:
                at: Any = np.arange(start, min(start + _PART, len(self)))
            else:
                at = self.places(fids[start : start + _PART])
                at = at[at >= 0]
            yield from zip(self.fid[at].tolist(), self.own_rows_at(at), strict=True)

    def key_ranks(self, fids: Sequence[int] | np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The rank of each of `fids` among these rows ordered by (key, finding id), as the
        ranks are counted from the key (`trustrank.ranking.ranks`); 0 for an id without a
        row. Rows by place in key order (as a run makes them) are ranked by their place;
        others are sorted once. Rows without keys (a queue stored before them) keep
        their stored ranks, which nothing has shifted since."""
        if self._key_rank is None:
            n, q, f = len(self), self.qkey, self.fid
            if not q.any():
                self._key_rank = self.rank.astype(np.int64)
            elif self.by_place and (n < 2 or bool(
                    ((q[1:] > q[:-1]) | ((q[1:] == q[:-1]) & (f[1:] > f[:-1]))).all())):
                # Ranked by place: no array of ten million ranks made for it.
                self._key_rank = _BY_PLACE
            else:
                self._key_rank = np.empty(n, dtype=np.int64)
                self._key_rank[np.lexsort((f, q))] = np.arange(1, n + 1)
        at = self.places(fids)
        if not len(self):
            return np.zeros(len(at), dtype=np.int64)
        if self._key_rank is _BY_PLACE:
            return np.where(at >= 0, at + 1, 0)
        return np.where(at >= 0, self._key_rank[np.maximum(at, 0)], 0)

    def ordered_after(self, before: QueueRows, kept: KeptPieces,
                      fresh: np.ndarray[Any, Any]) -> None:
        """Know these rows, made by place from `before` (by place) with the runs `kept` and
        the places `fresh` (`store_moved.rows_moved`), keys set, to be in key order when
        `before` is and each place where a run starts or a fresh row stands comes after
        the one before it: within a run, rows follow each other as they did in `before`,
        keys and all. `key_ranks` then asks no more (its check of every pair was 0.03 s a
        run at ten million)."""
        before.key_ranks(())
        if before._key_rank is not _BY_PLACE or not self.by_place:
            return
        p = np.union1d(kept.new, fresh)
        p = p[(p > 0) & (p < len(self))]
        q, f = self.qkey, self.fid
        if bool(((q[p] > q[p - 1]) | ((q[p] == q[p - 1]) & (f[p] > f[p - 1]))).all()):
            self._key_rank = _BY_PLACE

    def items_of(self, fids: Sequence[int] | np.ndarray[Any, Any]) -> Iterator[tuple[int, Row]]:
        """(finding id, row) of each of `fids` that has a row, in their order, made a part
        at a time."""
        for start in range(0, len(fids), _PART):
            part = np.asarray(fids[start : start + _PART], dtype=np.int64)
            at = self.places(part)
            found = at >= 0
            yield from zip(part[found].tolist(), self.rows_at(at[found]), strict=True)

    def digests_of(self, fids: Sequence[int] | np.ndarray[Any, Any]) -> set[str]:
        """The context digests of the rows of `fids`, looked up a part at a time (asked of
        a whole queue, its index arrays at once were 40 MB a million)."""
        seen = np.zeros(len(self.digests), dtype=bool)
        for start in range(0, len(fids), _PART):
            at = self.places(fids[start : start + _PART])
            seen[self.context[at[at >= 0]]] = True
        return {self.digests[c] for c in np.flatnonzero(seen).tolist()}

    # --- Mapping ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.fid)

    def __iter__(self) -> Iterator[int]:
        return iter(self.fid.tolist())

    def __getitem__(self, fid: int) -> Row:
        at = self.place(fid)
        if at is None:
            raise KeyError(fid)
        return self.row_at(at)

    def __contains__(self, fid: object) -> bool:
        return isinstance(fid, int) and self.place(fid) is not None

    def items(self) -> ItemsView[int, Row]:
        return _Items(self)

    def values(self) -> ValuesView[Row]:
        return _Values(self)

    # --- what the store counts ---------------------------------------------------------

    def env_counts(self) -> dict[str, int]:
        """Rows per environment (those with any): counted once per `env` column (a pass
        over ten million rows each time the store asked), or as `counted` gave them."""
        memo = self._env_counted
        if memo is None or memo[0] is not self.env:
            self.counted(np.bincount(self.env, minlength=len(self.envs)))
            memo = self._env_counted
            assert memo is not None
        return dict(memo[1])

    def counted(self, counts: np.ndarray[Any, Any]) -> None:
        """Take `counts` (rows per environment code) as the count of the `env` column as
        it is now."""
        self._env_counted = (self.env, {
            env: c for env, c in zip(self.envs, counts.tolist(), strict=True) if c})

    def distinct_contexts(self) -> int:
        # The codes index `digests`: counted in one pass (0.07 s at ten million rows, where
        # finding them distinct by a sort or a hash table took 0.3-0.4 s), once per
        # `context` column.
        return int(np.count_nonzero(self.context_counts()))

    def context_counts(self) -> np.ndarray[Any, Any]:
        """Rows per context code (int64, one per digest)."""
        memo = self._context_counted
        if memo is None or memo[0] is not self.context or len(memo[1]) != len(self.digests):
            counts = (np.bincount(self.context, minlength=len(self.digests)) if len(self.context)
                      else np.zeros(len(self.digests), dtype=np.int64))
            memo = self._context_counted = (self.context, counts)
        return memo[1]

    def contexts_counted(self, counts: np.ndarray[Any, Any]) -> None:
        """Take `counts` (rows per context code) as the count of the `context` column as it
        is now (an incremental run's, from the previous rows' and what came and went)."""
        self._context_counted = (self.context, counts)


class _Items(ItemsView[int, Row]):
    _mapping: QueueRows

    def __iter__(self) -> Iterator[tuple[int, Row]]:
        rows = self._mapping
        for start in range(0, len(rows), _PART):
            part = slice(start, start + _PART)
            yield from zip(rows.fid[part].tolist(), rows.rows_at(part), strict=True)


class _Values(ValuesView[Row]):
    _mapping: QueueRows

    def __iter__(self) -> Iterator[Row]:
        rows = self._mapping
        for start in range(0, len(rows), _PART):
            yield from rows.rows_at(slice(start, start + _PART))
