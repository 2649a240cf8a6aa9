"""A merged queue is held as pieces of earlier runs' sequences (`risk.pieces`): read as a
list of the same items, whatever chain of merges made it, and flattened past its bound."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from tests.risk.generate import generate
from trustrank.risk import canonical_json, pieces, rank
from trustrank.risk.incremental import rank_incremental
from trustrank.risk.pieces import Pieces, PiecesBuilder
from trustrank.risk.queue_index import QueueIndex
from trustrank.risk.ranked_queue import held_of


def _merged(previous: Pieces, rng: random.Random, serial: list[int]) -> tuple[Pieces, list]:
    """`previous` with random places dropped and fresh items put in, as a merge does it."""
    flat = list(previous)
    out, made = PiecesBuilder(), []
    expected = []
    at = 0
    while at < len(flat):
        if rng.random() < 0.2:
            fresh = serial[0]
            serial[0] += 1
            out.add(made, len(made), 1)
            made.append(fresh)
            expected.append(fresh)
        length = min(len(flat) - at, rng.randint(1, 9))
        out.add_from(previous, at, length)
        expected.extend(flat[at : at + length])
        at += length + (rng.random() < 0.3)  # sometimes one dropped after a run
    built = out.build()
    return Pieces.of(built), expected


@pytest.mark.parametrize("seed", range(6))
def test_pieces_of_pieces_read_as_the_list_they_stand_for(seed: int) -> None:
    rng = random.Random(seed)
    queue = Pieces.of(list(range(300)))
    serial = [1000]
    for _ in range(12):
        queue, expected = _merged(queue, rng, serial)
        assert list(queue) == expected and len(queue) == len(expected)
        assert [queue[k] for k in range(len(queue))] == expected
        assert queue[-1] == expected[-1]
        a, b = sorted(rng.sample(range(len(expected) + 1), 2))
        assert queue[a:b] == expected[a:b] and queue[b:a:-3] == expected[b:a:-3]
        # Every piece points into a flat sequence: the previous queue's own pieces are
        # followed, never nested.
        assert not any(isinstance(base, Pieces) for base in queue.bases)
    with pytest.raises(IndexError):
        queue[len(queue)]


def test_a_piece_continuing_the_last_one_extends_it() -> None:
    base = list(range(10))
    out = PiecesBuilder()
    out.add(base, 0, 3)
    out.add(base, 3, 2)  # continues: one piece
    out.add(base, 6, 2)  # a gap: a second piece
    out.add(base, 0, 0)  # nothing
    built = out.build()
    assert isinstance(built, Pieces) and built.ends == [5, 7] and list(built) == [
        0, 1, 2, 3, 4, 6, 7]
    whole = PiecesBuilder()
    whole.add(base, 0, 10)
    assert whole.build() is base


def test_past_the_bound_the_pieces_are_one_list(monkeypatch) -> None:
    monkeypatch.setattr(pieces, "MAX_PIECES", 4)
    base = list(range(20))
    out = PiecesBuilder()
    for start in range(0, 20, 2):  # ten pieces, each a gap apart
        out.add(base, start, 1)
    assert out.build() == list(range(0, 20, 2))


def test_incremental_runs_in_a_row_hold_pieces_and_rank_as_a_full_run() -> None:
    inputs = generate(3, findings=300)
    result = rank(inputs=inputs)
    rng = random.Random(3)
    for _ in range(5):
        picked = rng.sample(result.findings[:], 7)
        records = {r.finding_id: replace(r.finding, epss=rng.random(), in_kev=rng.random() < 0.3)
                   for r in picked}
        inputs = replace(inputs, findings=tuple(
            records.get(f.id, f) for f in inputs.findings))
        result = rank_incremental(previous=result, inputs=inputs, changed_findings=set(records))
        assert canonical_json(result) == canonical_json(rank(inputs=inputs))
        held = held_of(result.findings)
        assert isinstance(held, Pieces)
        assert not any(isinstance(base, Pieces) for base in held.bases)


def _decoded(index: QueueIndex) -> list[tuple[Any, ...]]:
    names = [{c: v for v, c in table.items()}
             for table in (index.versions, index.versions, index.envs, index.services)]
    columns = [index.record_version, index.context_version, index.env, index.service]
    return [tuple(names[k][c] for k, c in enumerate(row))
            for row in zip(*(c.tolist() for c in columns), strict=True)]


@pytest.mark.parametrize("bound", [pieces.MAX_PIECES, 3])
def test_a_merged_queues_index_finds_the_places_a_per_place_index_finds(
        bound: int, monkeypatch) -> None:
    """The index of a merged queue lays out the previous codes in the new order (the full
    run's codes are the same arrays run after run) and finds what depends on a version,
    environment or service where the queue holds it; past the bound, one array again."""
    monkeypatch.setattr(pieces, "MAX_PIECES", bound)
    inputs = generate(5, findings=400)
    result = rank(inputs=inputs)
    full_codes = result.queue_index.layout.bases[0]
    rng = random.Random(5)
    for _ in range(6):
        picked = rng.sample(result.findings[:], 9)
        records = {r.finding_id: replace(r.finding, epss=rng.random()) for r in picked}
        inputs = replace(inputs, findings=tuple(records.get(f.id, f) for f in inputs.findings))
        result = rank_incremental(previous=result, inputs=inputs, changed_findings=set(records))
        index = result.queue_index
        assert _decoded(index) == _decoded(QueueIndex.build(result.findings))
        queue = list(result.findings)
        versions = set(rng.sample(sorted({r.finding.project_version for r in queue}), 2))
        envs = {rng.choice([r.finding.environment for r in queue if r.finding.environment])}
        services = set(rng.sample(sorted({(r.finding.environment, r.finding.service)
                                          for r in queue if r.finding.environment}), 2))
        expected = [k for k, r in enumerate(queue) if (
            r.finding.project_version in versions or r.project_version in versions
            or r.finding.environment in envs
            or (r.finding.environment, r.finding.service) in services)]
        found = index.places_depending_on(versions=versions, envs=envs, services=services)
        assert found.tolist() == expected and expected
        assert not len(index.places_depending_on(versions=(), envs=(), services=()))
        if bound == 3:
            assert len(index.layout.ends) == 1
        else:
            assert any(codes is full_codes for codes in index.layout.bases)
