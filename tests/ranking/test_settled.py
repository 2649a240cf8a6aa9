"""The decisions a full gather found due dates settled for, kept as two arrays
(`inputs.settled.SettledDecisions`): the same answers as the dict they replace."""

from __future__ import annotations

import random

import numpy as np

from trustrank.ranking.inputs.settled import SettledDecisions
from trustrank.risk.inputs import DECISIONS


def test_settled_decisions_answer_as_a_dict_of_them_does():
    rng = random.Random(3)
    expected = {fid: rng.choice(DECISIONS) for fid in rng.sample(range(1, 10_000), 3000)}
    settled = SettledDecisions()
    for fid, decision in expected.items():  # in no order
        settled.note(fid, decision)
    assert len(settled) == 3000 and dict(settled.items()) == expected
    asked = np.array([*rng.sample(range(1, 10_000), 2000), 0, 20_000], dtype=np.int64)
    codes = settled.codes_of(asked)
    assert [DECISIONS[c] if c >= 0 else None for c in codes.tolist()] == [
        expected.get(fid) for fid in asked.tolist()]
    assert settled.has(asked).tolist() == [fid in expected for fid in asked.tolist()]
    some = next(iter(expected))
    assert settled[some] == expected[some] and some in settled and 0 not in settled
    assert settled.get(20_000) is None


def test_a_decision_of_another_name_is_settled_and_equals_no_ranked_one():
    settled = SettledDecisions()
    settled.note(5, "track")
    settled.note(3, DECISIONS[0])
    assert dict(settled.items()) == {3: DECISIONS[0], 5: "track"}
    codes = settled.codes_of(np.array([5, 3]))
    assert codes[0] not in range(len(DECISIONS)) and codes[1] == 0
    assert settled.has(np.array([5, 4])).tolist() == [True, False]


def test_no_settled_decision_is_empty():
    settled = SettledDecisions()
    assert not settled and settled == {} and list(settled) == []
    assert settled.codes_of(np.array([1, 2])).tolist() == [-1, -1]
