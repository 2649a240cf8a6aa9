"""The integer queue key and the numeric id tiebreak (risk-3): the engine's queue is the
order of (`queue_key_of(r)`, the finding id as a number) for database ids, in full runs
and after incremental ones; the scalar and vector keys agree; other ids still give one
deterministic order."""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from tests.risk.generate import generate, shuffled
from trustrank.risk import Finding, RankInputs, RankSettings, canonical_json, rank
from trustrank.risk.incremental import rank_incremental
from trustrank.risk.inputs import DECISIONS
from trustrank.risk.queue import QueueColumns, assemble
from trustrank.risk.queue_key import id_key, queue_key, queue_key_of, queue_keys

SEEDS = range(6)


def _numeric_ids(rng: random.Random, count: int) -> list[str]:
    """`count` distinct database-like ids of 1 to 6 digits, so string order and numeric
    order differ often ("10" < "9")."""
    out: set[str] = set()
    while len(out) < count:
        digits = rng.randint(1, 6)
        out.add(str(rng.randint(10 ** (digits - 1), 10**digits - 1)))
    return sorted(out, key=lambda _: rng.random())


def _with_numeric_ids(seed: int, *, findings: int = 120, copies: int = 40) -> RankInputs:
    """`generate`'s inputs with numeric ids, plus `copies` findings equal to others but
    for the id: ties in decision, deployed, level and score, broken by the id alone."""
    inputs = generate(seed, findings=findings)
    rng = random.Random(seed)
    records = list(inputs.findings)
    records += [rng.choice(records) for _ in range(copies)]
    ids = _numeric_ids(rng, len(records))
    return replace(inputs, findings=tuple(
        replace(f, id=fid) for f, fid in zip(records, ids, strict=True)))


def _assert_key_order(result, settings: RankSettings) -> None:
    """The queue is ordered by (integer key, numeric id), and ties that string order would
    put otherwise are there (else this check proves nothing about the tiebreak)."""
    key_of = queue_key_of(settings)
    keys = [(key_of(r), int(r.finding_id)) for r in result.findings]
    assert keys == sorted(keys)
    assert [r.rank for r in result.findings] == list(range(1, len(keys) + 1))
    tied = [(a[1], b[1]) for a, b in pairwise(keys) if a[0] == b[0]]
    assert any(str(x) > str(y) for x, y in tied), "no tie that string order would swap"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_full_run_orders_by_the_integer_key_then_the_numeric_id(seed):
    inputs = _with_numeric_ids(seed)
    settings = RankSettings()
    result = rank(inputs=inputs, settings=settings, with_digest=False)
    _assert_key_order(result, settings)
    # The columns carry the same keys, place by place.
    key_of = queue_key_of(settings)
    assert result.columns.qkey.dtype == np.int64
    assert result.columns.qkey.tolist() == [key_of(r) for r in result.findings]
    # The input order does not matter.
    again = rank(inputs=shuffled(inputs, seed), settings=settings, with_digest=False)
    assert canonical_json(again) == canonical_json(result)


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_an_incremental_run_keeps_the_key_order(seed, named):
    """Rescored and new findings tie with kept ones and with each other: the merge puts
    them by the numeric id, as the full run does."""
    inputs = _with_numeric_ids(seed)
    settings = RankSettings()
    previous = rank(inputs=inputs, settings=settings)
    rng = random.Random(seed + 1)
    records = list(inputs.findings)
    vulns = [f for f in records if f.kind == "vulnerability"]
    flipped = {f.id for f in rng.sample(vulns, 10)}
    closed = {f.id for f in rng.sample(records, 5)} - flipped
    taken = {f.id for f in records}
    # New findings equal to kept ones but for the id (of every length).
    new_ids = [x for x in _numeric_ids(rng, 60) if x not in taken][:30]
    new = [replace(rng.choice(records), id=fid) for fid in new_ids]
    changed = replace(inputs, findings=tuple(
        replace(f, in_kev=not f.in_kev) if f.id in flipped else f
        for f in records if f.id not in closed) + tuple(new))
    result = rank_incremental(
        previous=previous, inputs=changed, settings=settings,
        changed_findings=flipped | closed | set(new_ids) if named else None)
    _assert_key_order(result, settings)
    assert canonical_json(result) == canonical_json(rank(inputs=changed, settings=settings))


def test_other_ids_give_one_order_whatever_the_input_order():
    """Ids that are not database ids: shorter first, then string order, NUL characters
    and all, the same for any order of the input."""
    ids = ["log4shell", "f0001", "f0002", "9", "10", "a", "a\x00", "a\x00\x00", "b\x00",
           "é", "Z", "-1", "007", "7"]
    base = Finding(id="x", vuln_id="CVE-2099-0001", project_version="nowhere",
                   component_key="pkg:pypi/x", baseline=50.0)
    inputs = RankInputs(findings=tuple(replace(base, id=fid) for fid in ids))
    orders = set()
    for seed in range(5):
        mixed = list(inputs.findings)
        random.Random(seed).shuffle(mixed)
        result = rank(inputs=replace(inputs, findings=tuple(mixed)), with_digest=False)
        orders.add(tuple(r.finding_id for r in result.findings))
    assert orders == {tuple(sorted(ids, key=id_key))}
    assert next(iter(orders))[:5] == ("7", "9", "Z", "a", "é")


AWKWARD = [0.0, 100.0, 12.34565, 99.99995, 0.00005, 0.00015, 50.00005, 33.33335,
           1e-12, 99.9999999999, 12.3456, 0.0001, 87.65435]


def test_the_scalar_and_vector_keys_agree_on_awkward_scores():
    rng = random.Random(3)
    scores = AWKWARD + [rng.uniform(0, 100) for _ in range(2_000)] + [
        round(rng.uniform(0, 100), 4) for _ in range(2_000)]
    n = len(scores)
    decision = [rng.randrange(len(DECISIONS)) for _ in range(n)]
    deployed = [rng.random() < 0.7 for _ in range(n)]
    level = [rng.randrange(16) for _ in range(n)]
    vector = queue_keys(np.array(decision, dtype=np.int8), np.array(deployed),
                        np.array(level, dtype=np.int8), np.array(scores))
    assert vector.dtype == np.int64
    assert vector.tolist() == [queue_key(*row) for row in zip(
        decision, deployed, level, scores, strict=True)]
    # Python rounds halves to even, of the binary product (score × 10,000 is 2.5, 3.5,
    # 999,999.5 and 1.4999999999999998): the key does the same.
    assert [queue_key(3, True, 15, s) for s in (0.00025, 0.00035, 99.99995, 0.00015)] == [
        1_000_000 - 2, 1_000_000 - 4, 0, 1_000_000 - 1]


def test_the_key_orders_its_parts_as_the_queue_does():
    assert queue_key(3, True, 15, 100.0) == 0
    assert queue_key(0, False, 0, 0.0) == ((3 * 2 + 1) * 16 + 15) * 1_000_001 + 1_000_000
    parts = [(d, dep, lv, s) for d in range(4) for dep in (True, False)
             for lv in (0, 8, 15) for s in (0.0, 0.0001, 42.5, 99.9999, 100.0)]
    by_key = sorted(parts, key=lambda p: queue_key(*p))
    by_queue = sorted(parts, key=lambda p: (-p[0], not p[1], -p[2], -p[3]))
    assert by_key == by_queue


@pytest.mark.parametrize(("decision", "level", "score"), [
    (4, 0, 50.0), (-1, 0, 50.0), (0, 16, 50.0), (0, -1, 50.0), (0, 0, -0.0001),
    (0, 0, 100.0001), (0, 0, float("nan")), (0, 0, float("inf")),
])
def test_a_value_the_key_cannot_hold_is_refused(decision, level, score):
    with pytest.raises(ValueError):
        queue_key(decision, True, level, score)
    with pytest.raises(ValueError):
        queue_keys(np.array([1, decision]), np.array([True, True]), np.array([2, level]),
                   np.array([50.0, score]))


def test_a_run_whose_scores_would_share_a_key_is_refused():
    """Scores off the engine's 4-decimal grid: 50.00001 and 50.0 pack to one key, so the
    database would order them by id where the engine orders them by score."""
    records = [Finding(id="1", baseline=50.0), Finding(id="2", baseline=50.00001)]
    cols = QueueColumns.empty(2)
    cols.score[:] = [50.0, 50.00001]
    with pytest.raises(ValueError, match="share a queue key"):
        assemble(records, cols)
