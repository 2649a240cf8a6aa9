"""The rows of an incremental run's queue made from the previous run's rows by place: those
of the places the store walked (`store._walk_changed`), and those of a queue whose places
mostly moved (`rows_moved`): one finding rising renumbers every place below it, while
the findings there keep their own values and so their rows but for the ranks."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from trustrank.ranking.inputs.ids import pk_of
from trustrank.ranking.services.store_places import Located, moved_ids
from trustrank.ranking.services.store_rows import _DECISION_INDEX, QueueRows, Row
from trustrank.risk.buffers import BUFFERS, ascending
from trustrank.risk.queue import Moves
from trustrank.risk.queue_moves import KeptPieces
from trustrank.risk.results import RankedFinding


def queued_in(r: RankedFinding) -> str:
    """The environment a ranked finding is queued in: its context's when it runs
    somewhere, else ''."""
    context = r[5]
    return context[1] if context[0] else ""


def rows_moved(
    findings: Sequence[RankedFinding], moves: Moves, before: QueueRows,
    ids: Mapping[str, int], row_of: Callable[[RankedFinding, int, str], Row],
) -> tuple[QueueRows, list[int], list[int]]:
    """(rows, changed, gone) of an incremental result whose places mostly moved, from the
    previous run's rows by place `before` (`moves.previous` of them) and the runs of
    findings kept (`moves.kept`). A kept finding's row is copied from `before` a run at a
    time (its own values stand); only the rescored and new findings' rows are made, and
    compared with their old ones. Ranks are the places; a kept row's environment rank is
    its previous one moved by what came and went of its environment before its run
    (`_env_ranks_moved`): passes in C per column, where making every row again
    (`store._queue_rows`) cost 11.8 s of an incremental run at ten million."""
    n = len(findings)
    fresh = moves.fresh.tolist()
    pk = pk_of(ids)
    fresh_ids = [pk(findings[i][0]) for i in fresh]
    fresh_rows = [row_of(findings[i], 0, queued_in(findings[i])) for i in fresh]
    rows = rows_walked(before, moves.kept, n, fresh, fresh_ids, fresh_rows, with_ranks=False)
    rows.locate_by(moved_ids(before.located(), moves.kept, fresh_ids, fresh))
    rows.rank = ascending(n)
    dropped = moves.kept.dropped(len(before))  # previous places in no kept run
    rows.env_rank, counts = _env_ranks_moved(before, rows, moves.kept, dropped, fresh)
    rows.counted(counts)
    # Rows per context: the previous count, less the rows not kept, plus the fresh ones.
    n_digests = len(rows.digests)
    contexts = np.zeros(n_digests, dtype=np.int64)
    contexts[: len(before.digests)] = before.context_counts()
    contexts -= np.bincount(before.context[dropped], minlength=n_digests)
    contexts += np.bincount(rows.context[moves.fresh], minlength=n_digests)
    rows.contexts_counted(contexts)
    # Of the previous rows in no kept run, those not rescored: a few per change, where a
    # mask of every previous place was passes over ten million.
    gone = np.setdiff1d(before.fid[dropped],
                        np.asarray(fresh_ids, dtype=np.int64), assume_unique=True).tolist()
    old = before.places(fresh_ids).tolist()
    # Own values (environment, score, decision, context) against the old row; the key
    # follows from them.
    changed = [fid for fid, at, row in zip(fresh_ids, old, fresh_rows, strict=True)
               if at < 0 or before.row_at(at)[2:] != row[2:]]
    return rows, changed, gone


def rows_walked(
    before: QueueRows, of_place: np.ndarray[Any, Any] | KeptPieces, n: int,
    walked: list[int], walked_ids: list[int], walked_rows: list[Row], *,
    with_ranks: bool = True,
) -> QueueRows:
    """The rows of a queue of `n` places: at place i the row of `before` at `of_place[i]`
    (a negative place reads place 0: clipped), or, when `of_place` is runs of kept rows,
    the rows of `before` those runs moved there; except at the places `walked`, which have
    the ids and rows given (with runs, every place in none must be walked). Without
    `with_ranks`, the rank columns are left empty for the caller to set (a gather of ten
    million each saved, and no array of the queue's length made for them)."""
    envs, digests = list(before.envs), list(before.digests)
    env_codes = {e: k for k, e in enumerate(envs)}
    digest_codes = {d: k for k, d in enumerate(digests)}
    cols = []
    for column in (before.fid, before.rank, before.env_rank, before.env, before.score,
                   before.decision, before.context, before.qkey):
        if with_ranks or (column is not before.rank and column is not before.env_rank):
            values = BUFFERS.empty(n, column.dtype)
            _fill(values, column, of_place)
        else:
            values = np.zeros(0, dtype=column.dtype)
        cols.append(values)
    fid, rank, env_rank, env, score, decision, context, qkey = cols
    at = np.asarray(walked, dtype=np.int64)
    if len(at):
        qkey[at] = 0  # set by the store's keys (`store_keys`) for the rows it made
        fid[at] = walked_ids
        if with_ranks:
            rank[at] = list(map(itemgetter(0), walked_rows))
            env_rank[at] = list(map(itemgetter(1), walked_rows))
        for e in {r[2] for r in walked_rows} - env_codes.keys():
            env_codes[e] = len(envs)
            envs.append(e)
        env[at] = [env_codes[r[2]] for r in walked_rows]
        score[at] = list(map(itemgetter(3), walked_rows))
        decision[at] = [_DECISION_INDEX[r[4]] for r in walked_rows]
        for d in {r[5] for r in walked_rows} - digest_codes.keys():
            digest_codes[d] = len(digests)
            digests.append(d)
        context[at] = [digest_codes[r[5]] for r in walked_rows]
    return QueueRows(fid=fid, rank=rank, env_rank=env_rank, env=env, score=score,
                     decision=decision, context=context, envs=envs, digests=digests,
                     by_place=True, qkey=qkey)


def _env_ranks_moved(
    before: QueueRows, rows: QueueRows, kept: KeptPieces, dropped: np.ndarray[Any, Any],
    fresh: list[int],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The environment ranks of `rows`, made by `rows_walked` from `before` (rows by
    place) by the runs `kept` with the places `fresh` (ascending) walked, `dropped` being
    the places of `before` in no run (`KeptPieces.dropped`), and the rows per environment
    code.

    Kept runs keep their order, so the kept rows before a run are the same now and then:
    within it, every row of an environment moves by the fresh rows of that environment
    placed before it less the dropped ones that were (`shift`, one entry per environment,
    no pass over the rows). A run is its previous ranks copied, plus the shift of each
    environment whose shift is not zero, where the rows are of it: a copy alone for most
    runs. A fresh row's rank is counted on the new column, from the previous fresh row of
    its environment on: at most one pass per environment with fresh rows. Before, each run
    took a table's entry per row and counted its rows per environment (three passes over
    every row: 0.07-0.14 s at ten million); before that, each environment's places were
    counted afresh."""
    n_codes, env = len(rows.envs), rows.env
    ranks = BUFFERS.empty(len(env), np.int32)
    shift = np.zeros(n_codes, dtype=np.int64)  # fresh placed less dropped passed, per code
    dropped_env = before.env[dropped]
    dropped_at = dropped.tolist()
    fresh_env = env[np.asarray(fresh, dtype=np.int64)].tolist()
    counted = np.zeros(n_codes, dtype=np.int64)  # rows per code before `upto[code]`
    upto = [0] * n_codes
    f = d = 0

    def place_fresh(until: int) -> None:
        nonlocal f
        while f < len(fresh) and fresh[f] < until:
            at, e = fresh[f], fresh_env[f]
            counted[e] += np.count_nonzero(env[upto[e]:at] == e) + 1
            upto[e] = at + 1
            ranks[at] = counted[e]
            shift[e] += 1
            f += 1

    for old, new, length in zip(kept.old.tolist(), kept.new.tolist(), kept.length.tolist(),
                                strict=True):
        place_fresh(new)
        passed = bisect_left(dropped_at, old, lo=d)
        if passed > d:
            shift -= np.bincount(dropped_env[d:passed], minlength=n_codes)
            d = passed
        part = ranks[new : new + length]
        part[:] = before.env_rank[old : old + length]
        moving = np.flatnonzero(shift).tolist()
        if len(moving) > 2:
            # Many environments move here: a table's entry per row costs less than a pass
            # per environment.
            np.add(part, np.take(shift.astype(np.int32), env[new : new + length]), out=part)
        else:
            for e in moving:
                np.add(part, shift[e], out=part, where=env[new : new + length] == e,
                       casting="unsafe")
    place_fresh(len(env))
    # Rows per code: the previous ones, less those dropped, plus the fresh ones.
    previous = before.env_counts()
    counts = np.array([previous.get(e, 0) for e in rows.envs], dtype=np.int64)
    counts -= np.bincount(dropped_env, minlength=n_codes)
    counts += np.bincount(np.asarray(fresh_env, dtype=np.int64), minlength=n_codes)
    return ranks, counts


def ready_for_moves(rows: QueueRows) -> None:
    """Make now what the first `rows_moved` from `rows` would otherwise make while a run
    waits (a full run calls it once past its peak): the rows' lookup by finding id (a sort
    of every id), their counts per environment and context (a pass each), whether they are
    in key order (`QueueRows.key_ranks`: a pass over every pair), and the pool's
    arrays of the queue's length that `rows_moved` takes, written once so that the kernel
    has handed out their pages (a first incremental run at ten million spent 0.6 s of its
    store on new arrays, against 0.14 s in the runs after it)."""
    rows.located()
    rows.env_counts()
    rows.context_counts()
    rows.key_ranks(())
    n = len(rows)
    wanted = [c.dtype for c in (rows.fid, rows.env, rows.score, rows.decision, rows.context,
                                rows.qkey)] + [np.dtype(np.int32)]  # environment ranks
    BUFFERS.prepare(n, wanted)


def _fill(values: np.ndarray[Any, Any], column: np.ndarray[Any, Any],
          of_place: np.ndarray[Any, Any] | KeptPieces) -> None:
    """`rows_walked`'s copy of one column of `before` into `values`."""
    if isinstance(of_place, KeptPieces):
        # A run of kept rows is one slice copied: at ten million places, a gather by an
        # array of the places read them at random through that array (25-40 ms a column,
        # and the array itself had to be made each run).
        for old, new, length in zip(of_place.old.tolist(), of_place.new.tolist(),
                                    of_place.length.tolist(), strict=True):
            values[new : new + length] = column[old : old + length]
        return
    values[len(of_place):] = 0
    # Into the new column directly: a gather then a copy made and filled a temporary of
    # ten million beside it. Not numpy's default mode ("raise"), which buffers a take into
    # `out` (0.5 s a column at ten million, against 0.02 s); the places are in range, so
    # clipping changes none.
    np.take(column, of_place, out=values[: len(of_place)], mode="clip")


def walked_located(before: QueueRows, n: int, walked: list[int],
                   walked_fids: list[int]) -> Located | None:
    """How the rows made by `rows_walked` from `before` (rows by place, one per previous
    place) find an id's row: a place not walked holds the row it held, a walked one the
    id given."""
    runs: list[tuple[int, int, int]] = []
    start, end = 0, min(n, len(before))
    for at in (*walked, end):
        stop = min(at, end)
        if stop > start:
            runs.append((start, start, stop - start))
        start = max(start, at + 1)
    return moved_ids(before.located(), KeptPieces.of(runs), walked_fids, walked)
