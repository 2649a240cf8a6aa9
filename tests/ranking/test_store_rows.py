"""The stored rows as columns (`store_rows.QueueRows`) must read as the dictionary of rows
they replace: every lookup, iteration and comparison the store makes on them gives what
it gave on the dictionary. And the scores the gather shares between findings keep their
values as orjson writes them."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from trustrank.ranking.inputs.findings import _float_sharer, _shared_floats
from trustrank.ranking.services.store_compare import (
    compare_rows,
    compared_rows,
    decision_changed,
    moved_rows,
)
from trustrank.ranking.services.store_rows import QueueRows
from trustrank.risk.inputs import DECISIONS


def _rows(rng: random.Random, fids: list[int]) -> dict[int, tuple[int, int, str, float, str, str]]:
    return {fid: (rank, rng.randint(1, 50), rng.choice(["", "prod", "stag\\ing", "zürich"]),
                  rng.choice([0.0, 0.1 + 0.2, 5e-324, 100.0, rng.random() * 100]),
                  rng.choice(DECISIONS), rng.choice("abc") * 64)
            for rank, fid in enumerate(fids, start=1)}


@pytest.mark.parametrize("seed", range(20))
def test_rows_as_columns_read_as_the_dictionary(seed):
    rng = random.Random(seed)
    fids = rng.sample(range(1, 10_000), rng.randint(0, 300))
    rows = _rows(rng, fids)
    columns = QueueRows.of(rows)
    assert columns == rows and dict(columns.items()) == rows
    assert list(columns) == list(rows) and list(columns.values()) == list(rows.values())
    assert len(columns) == len(rows) and bool(columns) == bool(rows)
    for fid in [*fids[:20], 0, 10_001, *rng.sample(range(1, 10_000), 20)]:
        assert (fid in columns) == (fid in rows)
        assert columns.get(fid) == rows.get(fid)
        assert columns.place(fid) == (list(rows).index(fid) if fid in rows else None)
    asked = rng.sample(range(1, 10_000), 200)
    assert list(columns.items_of(asked)) == [(f, rows[f]) for f in asked if f in rows]
    assert columns.digests_of(asked) == {rows[f][5] for f in asked if f in rows}
    assert columns.env_counts() == {
        env: n for env in {r[2] for r in rows.values()}
        if (n := sum(r[2] == env for r in rows.values()))}
    assert columns.distinct_contexts() == len({r[5] for r in rows.values()})
    # Read back exactly: the digest of the rows is of their values as orjson writes them.
    assert orjson.dumps(list(columns.items())) == orjson.dumps(list(rows.items()))


@pytest.mark.parametrize("seed", range(20))
def test_comparisons_on_columns_are_the_dictionarys(seed):
    """What changed, left, moved and changed decision between two sets of rows, as the
    store found them on dictionaries."""
    rng = random.Random(seed)
    fids = rng.sample(range(1, 2_000), rng.randint(0, 200))
    before = _rows(rng, fids)
    kept = [f for f in fids if rng.random() > 0.1]
    rows = {}
    for rank, fid in enumerate([*kept, *rng.sample(range(2_000, 3_000), 5)], start=1):
        old = before.get(fid)
        # Mostly the previous row, else one field of it (or all, for a new finding) anew.
        if old is not None and rng.random() < 0.6:
            rows[fid] = old
        else:
            new = _rows(rng, [fid])[fid]
            field = rng.randrange(6)
            rows[fid] = new if old is None else (
                *old[:field], (rank, *new[1:])[field], *old[field + 1:])
    # The key: one per (score, decision) here; rows whose ranks alone differ are not
    # changed (others moved around them), nor moved.
    def keyed(rows):
        columns = QueueRows.of(rows)
        columns.qkey = (columns.score * 7 + columns.decision).astype("int64")
        return columns

    changed, gone = compare_rows(keyed(rows), keyed(before))
    assert changed.tolist() == [f for f, row in rows.items()
                                if f not in before or before[f][2:] != row[2:]]
    assert gone == [f for f in before if f not in rows]
    assert moved_rows(changed, keyed(before), keyed(rows)).tolist() == [
        f for f in changed.tolist() if f not in before
        or before[f][3] != rows[f][3] or before[f][4] != rows[f][4]]
    assert decision_changed(changed, QueueRows.of(before), QueueRows.of(rows)) == [
        f for f in changed.tolist() if f not in before or before[f][4] != rows[f][4]]
    # Both from one lookup, as the store makes them when it rewrites the queue.
    together = compared_rows(keyed(rows), keyed(before))
    assert together[0].tolist() == changed.tolist() and together[1] == gone
    assert together[2].tolist() == moved_rows(changed, keyed(before), keyed(rows)).tolist()


@pytest.mark.parametrize("seed", range(10))
def test_key_ranks_are_the_places_in_key_order(seed):
    """`key_ranks`: a finding's rank among the rows ordered by (key, finding id), whether
    the rows are by place in that order (ranked by place) or not (sorted); the rows of a
    queue stored before the keys keep their stored ranks."""
    rng = random.Random(seed)
    fids = rng.sample(range(1, 10_000), rng.randint(1, 300))
    rows = QueueRows.of(_rows(rng, fids))
    rows.qkey = np.array([rng.randint(1, 20) for _ in fids], dtype="int64")
    order = sorted(zip(rows.qkey.tolist(), fids, strict=True))
    expected = {f: k for k, (_q, f) in enumerate(order, start=1)}
    asked = [*rng.sample(fids, min(40, len(fids))), 10_001]
    want = [expected.get(f, 0) for f in asked]
    assert rows.key_ranks(asked).tolist() == want
    at = rows.places([f for _q, f in order])
    by_place = QueueRows(fid=rows.fid[at], rank=rows.rank[at], env_rank=rows.env_rank[at],
                         env=rows.env[at], score=rows.score[at], decision=rows.decision[at],
                         context=rows.context[at], envs=rows.envs, digests=rows.digests,
                         by_place=True, qkey=rows.qkey[at])
    assert by_place.key_ranks(asked).tolist() == want
    keyless = QueueRows.of(_rows(rng, fids))
    assert keyless.key_ranks(fids).tolist() == [keyless[f][0] for f in fids]


def test_an_empty_queue_has_no_rows():
    empty = QueueRows.of({})
    assert empty == {} and not empty and 5 not in empty and empty.get(5) is None
    assert empty.places([1, 2]).tolist() == [-1, -1]
    rows = QueueRows.of({3: (1, 1, "", 1.0, "defer", "a" * 64)})
    changed, gone = compare_rows(rows, empty)
    assert changed.tolist() == [3] and gone == []
    assert compare_rows(empty, rows)[1] == [3]
    assert empty.key_ranks([3]).tolist() == [0] and list(empty.own_items()) == []
    changed, gone, moved = compared_rows(rows, empty)
    assert changed.tolist() == moved.tolist() == [3] and gone == []


def test_shared_scores_keep_their_values_and_signs():
    """Equal scores of many findings become one object; a negative zero is never given a
    zero's object nor a zero a negative zero's (they are equal, but orjson writes them
    apart: the inputs digest would change)."""
    floats: dict[object, object] = {}
    values = (7.5, None, 0.0, float("7.5"), 9.8)
    shared = list(_shared_floats(values, floats))
    assert shared == list(values) and shared[0] is shared[3]
    with_negative_zero = (0.0, -0.0, 7.5)
    kept = list(_shared_floats(with_negative_zero, floats))
    assert orjson.dumps(kept) == orjson.dumps(with_negative_zero)
    fshare = _float_sharer(floats)
    assert fshare(float("7.5")) is shared[0] and fshare(None) is None
    assert orjson.dumps([fshare(-0.0), fshare(0.0)]) == b"[-0.0,0.0]"


def test_finding_ids_read_as_the_dictionary_of_ids():
    """`FindingIds` maps a finding id (its database id as text) to the database id as the
    dictionary it replaces did: text that is not such an id, or of another finding, is
    not in it; an update by closed and read findings is the dictionary's."""
    from trustrank.ranking.inputs.ids import FindingIds, finding_pks, pk_of

    rng = random.Random(3)
    pks = rng.sample(range(1, 100_000), 500)
    ids = FindingIds(pks)
    as_dict = {str(pk): pk for pk in pks}
    assert ids == as_dict and len(ids) == 500 and sorted(ids) == sorted(as_dict)
    for fid in [*as_dict, "0", "100001", f"0{pks[0]}", f" {pks[0]}", f"+{pks[0]}", "x", ""]:
        assert (fid in ids) == (fid in as_dict) and ids.get(fid) == as_dict.get(fid)
    assert 7 not in ids and FindingIds.of(as_dict) == as_dict and FindingIds.of(ids) is ids
    closed = {str(pk) for pk in pks[:40]} | {"100005"}
    read = [*pks[30:35], 100_001, 100_002]
    expected = {f: pk for f, pk in as_dict.items() if f not in closed}
    expected.update((str(pk), pk) for pk in read)
    assert ids.updated(closed=closed, read=read) == expected
    fids = [str(pk) for pk in rng.sample(pks, 100)]
    assert finding_pks(ids, fids, 100).tolist() == finding_pks(as_dict, fids, 100).tolist() \
        == [as_dict[f] for f in fids]
    assert [pk_of(ids)(f) for f in fids] == [pk_of(as_dict)(f) for f in fids]
    assert FindingIds([]) == {} and "1" not in FindingIds([])
