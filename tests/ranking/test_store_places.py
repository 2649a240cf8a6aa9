"""Finding a row by its finding id in rows made from earlier rows (`store_places`): the
index a chain of moved lookups gives is the one a sorted copy of the new rows' ids gives,
for every id the rows hold, every id they dropped and ids they never held, through more
runs in a row than the chain is allowed to grow."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trustrank.ranking.services.store import _walk_changed
from trustrank.ranking.services.store_places import MAX_DEPTH, MovedIds, SortedIds, moved_ids
from trustrank.ranking.services.store_rows import QueueRows
from trustrank.risk.queue import _places_of
from trustrank.risk.queue_moves import KeptPieces


def _asked(rng: random.Random, seen: set[int], fid: np.ndarray) -> np.ndarray:
    """Every id held now, every id seen before, and ids never held."""
    never = [max(seen) + 1 + k for k in range(5)] + [-3, 0]
    asked = [*fid.tolist(), *seen, *never]
    rng.shuffle(asked)
    return np.asarray(asked, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_of_moved_queues_finds_each_row_where_a_sort_finds_it(seed):
    rng = random.Random(seed)
    fid = np.asarray(rng.sample(range(1, 5_000), rng.randint(0, 300)), dtype=np.int64)
    seen = set(fid.tolist()) | {1}
    located: SortedIds | MovedIds | None = SortedIds(fid)
    depths = []
    for _ in range(MAX_DEPTH + 8):
        if located is None:
            located = SortedIds(fid)
        # The next queue, as the engine's merge makes it: some places dropped, fresh ids
        # (new ones, or ones that were dropped and come back elsewhere) put in between.
        kept = [p for p in range(len(fid)) if rng.random() > 0.1]
        dropped = sorted(set(fid.tolist()) - {int(fid[p]) for p in kept})
        fresh = rng.sample(dropped, len(dropped) // 2) + [
            max(seen) + 1 + k for k in range(rng.randint(0, 6))]
        pieces: list[tuple[int, int]] = []
        out: list[int] = []
        stream = [("kept", p) for p in kept]
        for f in fresh:
            stream.insert(rng.randint(0, len(stream)), ("fresh", f))
        for kind, value in stream:
            if kind == "kept":
                if pieces and pieces[-1][0] >= 0 and pieces[-1][0] + pieces[-1][1] == value:
                    pieces[-1] = (pieces[-1][0], pieces[-1][1] + 1)
                else:
                    pieces.append((value, 1))
                out.append(int(fid[value]))
            else:
                pieces.append((-1, 1))
                out.append(value)
        fresh_at, changed, kept_pieces = _places_of(pieces)
        # Each place's previous place (-1: fresh), from the kept runs.
        source = np.full(len(out), -1, dtype=np.int64)
        for o, n, length in zip(kept_pieces.old, kept_pieces.new, kept_pieces.length,
                                strict=True):
            source[n : n + length] = np.arange(o, o + length)
        assert fresh_at.tolist() == np.flatnonzero(source < 0).tolist()
        assert [int(fid[s]) if s >= 0 else None for s in source.tolist()] == [
            None if kind == "fresh" else int(fid[v]) for kind, v in stream]
        assert list(changed) == [k for k, s in enumerate(source.tolist()) if s != k]
        new = np.asarray(out, dtype=np.int64)
        assert kept_pieces.dropped(len(fid)).tolist() == sorted(
            set(range(len(fid))) - set(kept))
        located = moved_ids(located, kept_pieces, new[fresh_at], fresh_at)
        depths.append(0 if located is None else located.depth)
        seen |= set(out)
        fid = new
        if located is not None:
            asked = _asked(rng, seen, fid)
            assert located.places(asked).tolist() == SortedIds(fid).places(asked).tolist()
    # The chain grew to its limit, then started again from a sort.
    assert max(depths) == MAX_DEPTH and depths[MAX_DEPTH] == 0


def test_kept_pieces_move_places_by_their_run():
    kept = KeptPieces.of([(0, 2, 3), (5, 5, 2), (9, 7, 1)])
    old = np.asarray([-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert kept.moved(old).tolist() == [-1, 2, 3, 4, -1, -1, 5, 6, -1, -1, 7, -1]
    assert KeptPieces.of([]).moved(np.asarray([0, 3])).tolist() == [-1, -1]
    assert kept.dropped(12).tolist() == [3, 4, 7, 8, 10, 11]
    assert KeptPieces.of([]).dropped(3).tolist() == [0, 1, 2]
    assert KeptPieces.of([(0, 0, 3)]).dropped(3).tolist() == []


@pytest.mark.parametrize("seed", range(8))
def test_walked_rows_find_each_id_where_a_sort_finds_it(seed):
    """Rows the incremental store's walk made from rows by place (`_walk_changed`), looked
    up through the previous rows, over several walks in a row."""
    rng = random.Random(seed)

    def ranked(fid: str, rank: int) -> tuple[object, ...]:
        return (fid, rank, 50.0, "scheduled", None, (True, "a", *[None] * 8), None)

    def row_of(r, n, env):
        return (r[1], n, env, r[2], r[3], "ctx")

    order = [str(i) for i in range(rng.randint(1, 80))]
    prev = tuple(ranked(fid, k + 1) for k, fid in enumerate(order))
    before = QueueRows.from_items(((int(r[0]), row_of(r, k + 1, "a")) for k, r in
                                   enumerate(prev)))
    before.by_place = True
    seen = {int(f) for f in order}
    next_id = len(order)
    for _ in range(5):
        new_order = [r[0] for r in prev if rng.random() > 0.1]
        for _ in range(rng.randint(0, 3)):
            if new_order:
                new_order.insert(rng.randrange(len(new_order) + 1),
                                 new_order.pop(rng.randrange(len(new_order))))
        for _ in range(rng.randint(0, 4)):
            new_order.insert(rng.randrange(len(new_order) + 1), str(next_id))
            next_id += 1
        by_id = {r[0]: r for r in prev}
        new = tuple(by_id[f] if f in by_id and by_id[f][1] == k + 1 else ranked(f, k + 1)
                    for k, f in enumerate(new_order))
        ids = {f: int(f) for f in [*order, *new_order, *map(str, range(next_id))]}
        rows, _changed, _gone = _walk_changed(new, prev, before, ids, ids, row_of)
        assert isinstance(rows.located(), MovedIds)
        seen |= {int(f) for f in new_order}
        asked = _asked(rng, seen, rows.fid)
        assert rows.places(asked).tolist() == SortedIds(rows.fid).places(asked).tolist()
        rows.by_place = True
        prev, before, order = new, rows, new_order


def test_released_arrays_serve_a_later_run_and_held_ones_stay():
    """`risk.buffers`: rows released after a newer run replaced them give their columns
    to the next rows made by place, which are whole and right; a column something else
    still holds (a view, another name) is not given, and the released rows are empty."""
    from trustrank.ranking.services.store_moved import rows_walked
    from trustrank.risk.buffers import BUFFERS

    rng = random.Random(3)
    n = 50

    def rows_of(fids: list[int]) -> QueueRows:
        rows = QueueRows.from_items(((f, (k + 1, k + 1, "prod", rng.random(), "scheduled",
                                           "ctx")) for k, f in enumerate(fids)))
        rows.by_place = True
        return rows

    old = rows_of(list(range(1, n + 1)))
    held_view = old.score[:10]
    assert old.env_counts() == {"prod": n}  # its count, kept, does not hold the column
    given = old.release()
    assert len(old) == 0 and old.score is not None and not len(old.score)
    assert len(given) == 7  # every column but the one a view holds
    del held_view
    BUFFERS.clear()
    BUFFERS.give(given)
    before = rows_of(list(range(101, 101 + n)))
    expected = [before.row_at(k) for k in range(n)]
    source = np.arange(n, dtype=np.int32)
    made = rows_walked(before, source, n, [], [], [])
    assert any(made.fid is a for a in given)
    assert [made.row_at(k) for k in range(n)] == expected
    assert made.fid.tolist() == before.fid.tolist()
    BUFFERS.clear()


def test_the_pool_keeps_arrays_of_the_length_given_last_and_no_more_than_its_bound():
    """Arrays of a length no run asks for again (another team's queue, or one that grew
    since) do not pile up: giving arrays of a new length lets the others go, and the pool
    never holds more than its bound."""
    from trustrank.risk.buffers import _KEEP, ArrayPool

    pool = ArrayPool()
    first = [np.zeros(5, dtype=np.int32) for _ in range(3)]
    pool.give(first)
    assert pool.held() == 3
    pool.give([np.zeros(6, dtype=np.int64), np.zeros(6, dtype=np.int32)])
    assert pool.held() == 2
    assert all(pool.empty(5, np.int32) is not a for a in first)
    pool.give([np.zeros(6, dtype=np.int8) for _ in range(_KEEP * 2)])
    assert pool.held() == _KEEP
    taken = pool.empty(6, np.int64)
    assert len(taken) == 6 and taken.dtype == np.int64 and pool.held() == _KEEP - 1


def test_rows_copied_by_kept_runs_are_the_rows_those_runs_moved():
    """`rows_walked` given the runs of kept rows copies each run whole, and the places in
    no run take the walked rows; the ranks by place are one kept array, read-only, that
    the rows never give to the pool."""
    from trustrank.ranking.services.store_moved import rows_walked
    from trustrank.risk.buffers import ascending

    rng = random.Random(5)
    n = 40
    before = QueueRows.from_items(((f, (k + 1, k + 1, rng.choice(["prod", "dev"]),
                                        rng.random(), "scheduled", f"ctx{k % 3}"))
                                   for k, f in enumerate(range(1, n + 1))))
    before.by_place = True
    # Places 0-9 keep theirs, 10-11 are fresh, 12-37 hold previous 14-39 (12-13 dropped).
    kept = KeptPieces.of([(0, 0, 10), (14, 12, 26)])
    fresh_rows = [(0, 0, "prod", 0.5, "immediate", "ctx-new"), (0, 0, "dev", 0.25,
                                                                "out-of-cycle", "ctx0")]
    made = rows_walked(before, kept, 38, [10, 11], [500, 501], fresh_rows, with_ranks=False)
    assert made.fid.tolist() == [*range(1, 11), 500, 501, *range(15, 41)]
    expected = [before.row_at(k)[2:] for k in range(10)] + [r[2:] for r in fresh_rows] + [
        before.row_at(k)[2:] for k in range(14, 40)]
    made.rank, made.env_rank = ascending(38), ascending(38)
    assert [made.row_at(k)[2:] for k in range(38)] == expected
    assert made.qkey[10] == 0 == made.qkey[11] and made.qkey[12] == before.qkey[14]
    ranks = ascending(38)
    assert ranks.tolist() == list(range(1, 39)) and not ranks.flags.writeable
    assert ascending(1000)[:38].tolist() == ranks.tolist()
    assert not any(a is made.rank for a in made.release())


def _random_layout(rng: random.Random, n: int, *, fresh_at_once: list[int],
                   dropped_at_once: list[int], longest: int,
                   ) -> tuple[list[tuple[int, int, int]], list[int], int]:
    """A merge of `n` previous places at random: kept runs (old start, new start, length),
    the fresh places between and after them (ascending) and the new queue's length."""
    runs: list[tuple[int, int, int]] = []
    fresh: list[int] = []
    at = place = 0
    while at < n:
        for _ in range(rng.choice(fresh_at_once)):
            fresh.append(place)
            place += 1
        at += rng.choice(dropped_at_once)
        length = min(n - at, rng.randint(1, longest))
        if length > 0:
            runs.append((at, place, length))
            at += length
            place += length
    fresh.extend(range(place, place + rng.choice([0, 2])))
    return runs, fresh, len(fresh) + sum(length for _old, _new, length in runs)


@pytest.mark.parametrize("seed", range(40))
def test_environment_ranks_moved_by_runs_are_those_counted_afresh(seed):
    """A kept row's environment rank is its previous one moved by what came and went of
    its environment before its run (`store_moved._env_ranks_moved`): the ranks and counts
    a count of every place gives, whatever was dropped, kept or put in between."""
    from trustrank.ranking.services.store_moved import _env_ranks_moved, rows_walked
    from trustrank.ranking.services.store_rows import env_ranks

    rng = random.Random(seed)
    n = rng.randint(1, 120)
    # Up to six environments: runs where none, one, two or more of them move.
    envs = ["prod", "dev", "", "stage", "qa", "edge"][: rng.randint(2, 6)]
    values = [(0, 0, rng.choice(envs[:-1]), rng.random(), "scheduled", "ctx")
              for _ in range(n)]
    before = QueueRows.from_items(zip(range(1, n + 1), values, strict=True))
    before.env_rank = env_ranks(before.env, len(before.envs)).copy()
    before.by_place = True
    runs, fresh, total = _random_layout(rng, n, fresh_at_once=[0, 0, 1, 3],
                                        dropped_at_once=[0, 0, 1, 2], longest=15)
    fresh_rows = [(0, 0, rng.choice(envs), 0.5, "immediate", "new") for _ in fresh]
    rows = rows_walked(before, KeptPieces.of(runs), total, fresh,
                       [10_000 + k for k in range(len(fresh))], fresh_rows, with_ranks=False)
    kept = KeptPieces.of(runs)
    ranks, counts = _env_ranks_moved(before, rows, kept, kept.dropped(n), fresh)
    assert ranks.tolist() == env_ranks(rows.env, len(rows.envs)).tolist()
    assert counts.tolist() == np.bincount(rows.env, minlength=len(rows.envs)).tolist()
    rows.env_rank = ranks
    rows.counted(counts)
    fresh_count = dict(QueueRows.from_items(
        [(1, (0, 0, rows.envs[c], 0.0, "scheduled", "x")) for c in rows.env.tolist()]).env_counts())
    assert rows.env_counts() == fresh_count


def test_the_pool_prepares_the_arrays_it_lacks():
    """`ArrayPool.prepare` makes only the arrays the pool does not hold yet, each written
    once, and keeps them for the next takes."""
    from trustrank.risk.buffers import ArrayPool

    pool = ArrayPool()
    held = np.ones(6, dtype=np.int32)
    pool.give([held])
    pool.prepare(6, [np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int32)])
    assert pool.held() == 3
    taken = [pool.empty(6, np.int32), pool.empty(6, np.int32)]
    assert any(a is held for a in taken)
    assert pool.empty(6, np.int64).tolist() == [0] * 6 and pool.held() == 0
    pool.prepare(6, [np.dtype(np.int8)])
    pool.prepare(6, [np.dtype(np.int8)])  # held already: nothing more made
    assert pool.held() == 1


@pytest.mark.parametrize("seed", range(40))
def test_rows_moved_from_rows_in_key_order_know_their_order_from_the_runs_bounds(seed):
    """Rows made from rows in key order by kept runs and fresh rows are in key order
    exactly when every place where a run starts or a fresh row stands follows its
    predecessor (`QueueRows.ordered_after`): their ranks by key are those a sort of every
    row gives, whichever way it was found."""
    from trustrank.ranking.services.store_moved import rows_walked

    rng = random.Random(7000 + seed)
    n = rng.randint(1, 80)
    keys = sorted(rng.sample(range(10, 10_000), n))
    values = [(0, 0, "prod", 0.5, "scheduled", "ctx", k) for k in keys]
    before = QueueRows.from_items(zip(range(1, n + 1), values, strict=True), keyed=True)
    before.by_place = True
    runs, fresh, total = _random_layout(rng, n, fresh_at_once=[0, 0, 1, 2],
                                        dropped_at_once=[0, 0, 1], longest=12)
    rows = rows_walked(before, KeptPieces.of(runs), total, fresh,
                       [1_000 + k for k in range(len(fresh))],
                       [(0, 0, "prod", 0.5, "scheduled", "new") for _ in fresh])
    # A fresh row's key: between its neighbours' (in order), or anywhere (most often not).
    for p in fresh:
        lo = int(rows.qkey[p - 1]) if p > 0 else 0
        rows.qkey[p] = lo + 1 if rng.random() < 0.7 else rng.randrange(0, 10_500)
    rows.ordered_after(before, KeptPieces.of(runs), np.asarray(fresh, dtype=np.int64))
    q, f = rows.qkey, rows.fid
    in_order = bool(((q[1:] > q[:-1]) | ((q[1:] == q[:-1]) & (f[1:] > f[:-1]))).all())
    assert (rows._key_rank is not None) == in_order
    by_sort = np.empty(total, dtype=np.int64)
    by_sort[np.lexsort((f, q))] = np.arange(1, total + 1)
    assert rows.key_ranks(f).tolist() == by_sort.tolist()
