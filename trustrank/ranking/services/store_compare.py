"""Rows compared with rows: an incremental run's with those it kept (`compare_rows`,
`moved_rows`, `decision_changed`), and a full run's with the team's stored queue as it is
read, a chunk at a time in key order (`stored_compared`): the findings whose row is new or
changed, those whose row left, and the stored rows of those alone, each with its rank as
it was counted. The stored queue is never held whole: read into columns and then
compared, at ten million findings it and the lookups comparing it raised the hourly full
run's peak from 7.1 to 8.8-9.3 GB."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from trustrank.lib.db import binary_rows
from trustrank.ranking.services.store_copy import _CHUNK
from trustrank.ranking.services.store_rows import Ids, QueueRows, chunk_columns


@dataclass(frozen=True)
class Compared:
    """What a full run's rows change of the stored queue (`compare_rows` and `moved_rows`
    of the whole queue give the same)."""

    # The rows' findings whose row is new or whose own values differ, in the rows' order.
    changed: np.ndarray[Any, Any]
    # Stored findings with no row now, in key order.
    gone: list[int]
    # Of `changed`: new, or their key, score or decision differs (a history line each).
    moved: np.ndarray[Any, Any]
    # The stored rows of `changed` (those that had one; past `rewrite_above`, of the moved
    # ones only) and of `gone`, with their ranks in the stored queue as
    # `QueueRows.key_ranks` counts them.
    before: QueueRows
    # How many rows were stored.
    stored: int


class _CodesIn:
    """Per code of a table that grows (value -> code, in code order), the code of the same
    value among `values` (-1 when it has none)."""

    def __init__(self, values: list[str]) -> None:
        self.codes = {v: i for i, v in enumerate(values)}
        self.of = np.zeros(0, dtype=np.int64)

    def __call__(self, table: dict[str, int]) -> np.ndarray[Any, Any]:
        if len(self.of) < len(table):
            new = [self.codes.get(v, -1) for v in islice(table, len(self.of), None)]
            self.of = np.concatenate([self.of, np.array(new, dtype=np.int64)])
        return self.of


def stored_compared(team_id: int, rows: QueueRows, *, rewrite_above: int | None = None,
                    chunk: int = _CHUNK) -> Compared:
    """Compare `rows` (every row of the team's new queue) with the team's stored rows, read
    by a server-side cursor `chunk` rows at a time in key order (the order the stored
    ranks are counted in, so a row's rank is its place in the reading). Once more than
    `rewrite_above` rows changed (the queue is then written whole, and only the history
    reads the stored rows), `before` keeps the stored rows of the moved and gone findings
    alone: when an hour without traffic changed every finding's explanation but no key,
    ten million unread rows were kept."""
    n = len(rows)
    seen = np.zeros(n, dtype=bool)  # rows whose finding had a stored row
    differs = np.zeros(n, dtype=bool)  # ... whose own values differ from it
    moves = np.zeros(n, dtype=bool)  # ... whose key, score or decision does
    env_in_rows, context_in_rows = _CodesIn(rows.envs), _CodesIn(rows.digests)
    envs: dict[str, int] = {}
    digests: dict[str, int] = {}
    kept: list[tuple[np.ndarray[Any, Any], ...]] = []
    ranks: list[np.ndarray[Any, Any]] = []
    gone: list[int] = []
    stored, keyed = 0, False
    only_changed = 0  # stored rows kept for a change that moves nothing
    limit = n if rewrite_above is None else rewrite_above
    with binary_rows(
            "SELECT finding_id, rank, env_rank, environment, score, decision, context_id, "
            "qkey FROM ranking_rankedfinding WHERE team_id = %s ORDER BY qkey, finding_id",
            [team_id]) as cur:
        while part := cur.fetchmany(chunk):
            cols = chunk_columns(part, envs, digests)
            fid, _rank, _env_rank, env, score, decision, context, qkey = cols
            at = rows.places(fid)
            found = at >= 0
            old, new = np.flatnonzero(found), at[found]
            seen[new] = True
            move = ((qkey[old] != rows.qkey[new]) | (score[old] != rows.score[new])
                    | (decision[old] != rows.decision[new]))
            differ = (move | (env_in_rows(envs)[env[old]] != rows.env[new])
                      | (context_in_rows(digests)[context[old]] != rows.context[new]))
            moves[new[move]] = True
            differs[new[differ]] = True
            keep = ~found
            keep[old[move]] = True
            if only_changed <= limit:
                only_changed += int(np.count_nonzero(differ & ~move))
                if only_changed <= limit:
                    keep[old[differ]] = True
                else:  # past the limit: those kept so far go too
                    kept, ranks = _moved_or_gone(kept, ranks, rows)
            gone.extend(fid[~found].tolist())
            taken = np.flatnonzero(keep)
            kept.append(tuple(c[taken] for c in cols))
            ranks.append(taken + (stored + 1))
            keyed = keyed or bool(qkey.any())
            stored += len(part)
    # A queue stored before keys were keeps its stored ranks, as `key_ranks` would.
    key_rank = np.concatenate(ranks if keyed else [c[1] for c in kept]) if kept else None
    before = QueueRows.joined(kept, envs=list(envs), digests=list(digests), keyed=True,
                              key_rank=key_rank)
    new_rows = ~seen
    return Compared(changed=rows.fid[new_rows | differs], gone=gone,
                    moved=rows.fid[new_rows | moves], before=before, stored=stored)


def _moved_or_gone(
    kept: list[tuple[np.ndarray[Any, Any], ...]], ranks: list[np.ndarray[Any, Any]],
    rows: QueueRows,
) -> tuple[list[tuple[np.ndarray[Any, Any], ...]], list[np.ndarray[Any, Any]]]:
    """Of the kept stored rows (and their ranks), those of findings gone from `rows` or
    whose key, score or decision differs there."""
    out: list[tuple[np.ndarray[Any, Any], ...]] = []
    out_ranks: list[np.ndarray[Any, Any]] = []
    for cols, rank in zip(kept, ranks, strict=True):
        fid, _rank, _env_rank, _env, score, decision, _context, qkey = cols
        at = rows.places(fid)
        keep = at < 0
        if len(rows):
            new = np.maximum(at, 0)
            keep |= (qkey != rows.qkey[new]) | (score != rows.score[new]) | (
                decision != rows.decision[new])
        out.append(tuple(c[keep] for c in cols))
        out_ranks.append(rank[keep])
    return out, out_ranks


def _translation(old: list[str], new: list[str]) -> np.ndarray[Any, Any]:
    """Per code of `old`, the code of the same value in `new` (-1 when it has none)."""
    codes = {v: i for i, v in enumerate(new)}
    return np.array([codes.get(v, -1) for v in old], dtype=np.int64).reshape(len(old))


def compare_rows(rows: QueueRows, before: QueueRows) -> tuple[np.ndarray[Any, Any], list[int]]:
    """(findings of `rows` whose row is new or whose own values (`OwnRow`) differ from
    `before`'s, in `rows`' order; findings of `before` with no row in `rows`, in `before`'s
    order). A row whose ranks alone differ is not changed: others moved around it."""
    changed, gone, _moved = _compared(rows, before, with_moved=False)
    return changed, gone


def compared_rows(
    rows: QueueRows, before: QueueRows,
) -> tuple[np.ndarray[Any, Any], list[int], np.ndarray[Any, Any]]:
    """`compare_rows`, and of the findings it says changed, those `moved_rows` gives, made
    from the same lookup of every row in `before` (looking the changed findings up again
    in both, when nearly all changed, made a hundred megabytes of index arrays a million
    at the run's peak)."""
    changed, gone, moved = _compared(rows, before, with_moved=True)
    assert moved is not None
    return changed, gone, moved


def _compared(
    rows: QueueRows, before: QueueRows, *, with_moved: bool,
) -> tuple[np.ndarray[Any, Any], list[int], np.ndarray[Any, Any] | None]:
    at = before.places(rows.fid)
    found = at >= 0
    kept = np.zeros(len(before), dtype=bool)
    kept[at[found]] = True
    gone = before.fid[~kept].tolist()
    del kept
    b = np.where(found, at, 0)
    del at
    moved = None
    if len(before):
        # A row's own values: its key, score or decision (`moved_rows`); then its
        # environment and context. Its ranks are not compared: one finding rising shifts
        # the ranks of every finding below it, whose rows are not written again.
        differ = before.qkey[b] != rows.qkey
        differ |= before.score[b] != rows.score
        differ |= before.decision[b] != rows.decision
        same = found & ~differ
        if with_moved:
            moved = differ
        del differ
        same &= _translation(before.envs, rows.envs)[before.env[b]] == rows.env
        same &= _translation(before.digests, rows.digests)[before.context[b]] == rows.context
    else:
        same = found
    changed = rows.fid[~same]
    if with_moved:
        # Of the changed rows: new to `before`, or moved.
        moved = rows.fid[~same & (~found | moved)] if moved is not None else changed
    return changed, gone, moved


def moved_rows(changed: Ids, before: QueueRows, rows: QueueRows) -> np.ndarray[Any, Any]:
    """Of `changed` (findings with a row in `rows`), those new to `before` or whose key,
    score or decision differs there: the findings whose history has a line."""
    fids = np.asarray(changed, dtype=np.int64)
    new, old = rows.places(fids), before.places(fids)
    differ = old < 0
    if len(before):
        o = np.where(differ, 0, old)
        differ |= ((before.qkey[o] != rows.qkey[new]) | (before.score[o] != rows.score[new])
                   | (before.decision[o] != rows.decision[new]))
    return fids[differ]


def decision_changed(fids: Ids, before: QueueRows, rows: QueueRows) -> list[int]:
    """Of `fids` (findings with a row in `rows`), those new to `before` or whose decision
    differs there."""
    ids = np.asarray(fids, dtype=np.int64)
    new, old = rows.places(ids), before.places(ids)
    differ = old < 0
    if len(before):
        differ |= before.decision[np.where(old >= 0, old, 0)] != rows.decision[new]
    return ids[differ].tolist()
