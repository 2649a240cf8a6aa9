"""An incremental run's queue holds the previous queue's ranked findings as they are and
reads each with its new rank (`RankedQueue`): one finding rising no longer makes a new
tuple for every place below it, and what is read is what a full run gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.risk.generate import generate
from trustrank.risk import canonical_json, rank
from trustrank.risk.incremental import rank_incremental
from trustrank.risk.ranked_queue import RankedQueue, held_of


def test_each_place_is_read_with_its_rank() -> None:
    ranked = rank(inputs=generate(0, findings=30), with_digest=False).findings
    n = len(ranked) + 1
    held = (ranked[0], *ranked)  # every tuple after the first one place too high
    queue = RankedQueue(held)
    assert len(queue) == n
    assert [r.rank for r in queue] == list(range(1, n + 1))
    assert queue[0] is held[0]  # its rank is right: the very tuple
    assert queue[5].rank == 6 and queue[5][2:] == held[5][2:]
    assert queue[5].finding_id == held[5].finding_id
    assert queue[-1].rank == n
    assert [r.rank for r in queue[2:5]] == [3, 4, 5]
    assert [r.rank for r in queue[::-7]] == list(range(n, 0, -7))
    assert queue == tuple(queue) and tuple(queue) == queue
    assert queue != held
    assert queue != tuple(ranked)
    assert next(reversed(queue)).rank == n
    assert queue.index(queue[7]) == 7
    with pytest.raises(IndexError):
        queue[n]
    assert held_of(queue) is held and held_of(ranked) is ranked


def test_a_rising_finding_leaves_the_findings_below_it_the_same_objects() -> None:
    inputs = generate(1, findings=200)
    previous = rank(inputs=inputs)
    last = previous.findings[-1]
    risen = replace(last.finding, in_kev=True, epss=0.97)
    changed = replace(inputs, findings=tuple(
        risen if f.id == last.finding_id else f for f in inputs.findings))
    result = rank_incremental(previous=previous, inputs=changed,
                              changed_findings={last.finding_id})
    assert canonical_json(result) == canonical_json(rank(inputs=changed))
    queue = result.findings
    assert isinstance(queue, RankedQueue)
    new_rank = next(r.rank for r in queue if r.finding_id == last.finding_id)
    assert new_rank < last.rank
    # Every other finding is the previous run's tuple, those below the risen one holding
    # their old rank until read.
    before = {r.finding_id: r for r in previous.findings}
    held = held_of(queue)
    others = [k for k, r in enumerate(held) if r.finding_id != last.finding_id]
    assert all(held[k] is before[held[k].finding_id] for k in others)
    assert sum(held[k].rank != k + 1 for k in others) == len(queue) - new_rank
    assert [r.rank for r in queue] == list(range(1, len(queue) + 1))

    # A run merged from that queue reads right too, and holds the same tuples again.
    fallen = replace(risen, in_kev=False, epss=0.0)
    again = replace(changed, findings=tuple(
        fallen if f.id == last.finding_id else f for f in changed.findings))
    next_result = rank_incremental(previous=result, inputs=again,
                                   changed_findings={last.finding_id})
    assert canonical_json(next_result) == canonical_json(rank(inputs=again))
    assert sum(r is before[r.finding_id] for r in held_of(next_result.findings)) >= (
        len(others))
