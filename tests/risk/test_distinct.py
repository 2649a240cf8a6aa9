"""Distinct values by sorting (trustrank/risk/distinct.py): the same arrays as numpy's set
functions, and the finding ids of a ranking run made without them (numpy 2.3 and later find
distinct values with a hash table, 20 times slower on ids that are all distinct)."""

from __future__ import annotations

import numpy as np
import pytest

from trustrank.ranking.inputs.ids import FindingIds
from trustrank.risk.distinct import sorted_distinct, sorted_updated


@pytest.mark.parametrize("seed", range(4))
def test_sorted_distinct_equals_numpy_unique(seed):
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(0, 40))
        values = rng.integers(-20, 20, n).astype(rng.choice([np.int64, np.int32]))
        if rng.random() < 0.3:
            values = np.sort(values)
        got = sorted_distinct(values)
        assert got.dtype == values.dtype
        assert np.array_equal(got, np.unique(values))


def test_sorted_distinct_of_sorted_distinct_values_is_a_copy():
    values = np.arange(10, dtype=np.int64)
    got = sorted_distinct(values)
    assert np.array_equal(got, values) and got is not values
    got[0] = 99
    assert values[0] == 0


@pytest.mark.parametrize("seed", range(4))
def test_sorted_updated_equals_union_of_difference(seed):
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        before = np.unique(rng.integers(0, 60, int(rng.integers(0, 40)))).astype(np.int64)
        remove = rng.integers(-5, 70, int(rng.integers(0, 10)))
        add = rng.integers(-5, 70, int(rng.integers(0, 10)))
        kept = before.copy()
        got = sorted_updated(before, remove=remove, add=add)
        assert np.array_equal(got, np.union1d(np.setdiff1d(before, remove), add))
        assert got.dtype == np.int64
        assert np.array_equal(before, kept)  # the input is not changed


def test_finding_ids_use_no_hash_based_set_function(monkeypatch):
    """A run's finding ids are built and updated without np.unique, np.union1d or
    np.setdiff1d (each finds distinct values by hashing since numpy 2.3)."""
    def refused(*args, **kwargs):
        raise AssertionError("hash-based set function called")

    for name in ("unique", "union1d", "setdiff1d", "intersect1d"):
        monkeypatch.setattr(np, name, refused)
    ids = FindingIds([5, 3, 3, 9, 1])
    assert ids.pks.tolist() == [1, 3, 5, 9]
    updated = ids.updated(closed=["3", "4"], read=[7, 1, 11])
    assert updated.pks.tolist() == [1, 5, 7, 9, 11]
    assert ids.pks.tolist() == [1, 3, 5, 9]
    assert dict(updated) == {"1": 1, "5": 5, "7": 7, "9": 9, "11": 11}
