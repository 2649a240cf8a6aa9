"""A ranking run's digests of what it stored, and what a full run does while PostgreSQL
stores its queue: the findings' hash sum for the inputs digest and the queue's index."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from operator import methodcaller

import orjson

from trustrank.ranking.services.store_rows import Ids, OwnRow, QueueRows
from trustrank.risk import inputs as ri
from trustrank.risk.engine import with_inputs_digest
from trustrank.risk.queue import QueueIndex
from trustrank.risk.results import RankedFinding, RankResult, findings_hash_sum

MODULUS = 1 << 256


def row_hashes(rows: Iterable[tuple[int, OwnRow]]) -> int:
    """The sum of the SHA-256 of each (finding id, (queue key, environment, score,
    decision, context digest)) as orjson writes it, as a number."""
    return sum(map(int.from_bytes, map(_digest_of, map(hashlib.sha256, map(
        orjson.dumps, rows)))))


_digest_of = methodcaller("digest")


def rows_digest(rows: QueueRows) -> str:
    """What the run stored, as a digest: the sum modulo 2^256 of one SHA-256 per row of
    its own values (the finding's id, queue key, environment, score, decision and the
    digest of its context, which covers the explanation), in 64 hex digits. The key fixes
    the order, so the ranks are not hashed: one finding rising changes its own row's hash,
    not those of the findings below it. Equal rows, equal digest, in any order; and a run
    that changed a few rows updates its predecessor's digest by those rows alone."""
    return f"{row_hashes(rows.own_items()) % MODULUS:064x}"


def rows_digest_update(
    digest: str, *, before: QueueRows, rows: QueueRows, changed: Ids, gone: list[int],
) -> str:
    """`rows_digest(rows)` from the digest of `before`, given every finding whose row
    changed or is new (`changed`) and every one whose row left (`gone`)."""
    old = row_hashes(before.own_items([*changed, *gone]))
    new = row_hashes(rows.own_items(changed))
    return f"{(int(digest, 16) - old + new) % MODULUS:064x}"


class FindingsHash:
    """`findings_hash_sum` of a full run's records, a part at a time (`step`), so that it
    is made while PostgreSQL stores the queue (about two seconds at a million findings,
    where the run would otherwise wait); `total` hashes what is left."""

    def __init__(self, findings: tuple[ri.Finding, ...], part: int = 50_000) -> None:
        self.findings, self.part, self.at, self.sum = findings, part, 0, 0

    def step(self) -> None:
        if self.at < len(self.findings):
            self.sum += findings_hash_sum(self.findings[self.at : self.at + self.part])
            self.at += self.part

    def total(self) -> int:
        while self.at < len(self.findings):
            self.step()
        return self.sum % MODULUS


class Meanwhile:
    """What a full run does while PostgreSQL stores its queue, a step per chunk sent (see
    `store_columns.store_first_from_columns`): the findings' hash sum for the inputs
    digest, a part at a time, then the queue's index for the next incremental run
    (`QueueIndex.in_parts`). `finish` does what is left and gives the result both."""

    def __init__(self, findings: tuple[ri.Finding, ...],
                 queue: Sequence[RankedFinding]) -> None:
        self.hash = FindingsHash(findings)
        self.index_parts = QueueIndex.in_parts(queue)
        self.index: QueueIndex | None = None

    def step(self) -> bool:
        """One step of what is left; False when nothing was."""
        if self.hash.at < len(self.hash.findings):
            self.hash.step()
        elif self.index is None:
            self.index = next(self.index_parts)
        else:
            return False
        return True

    def finish(self, result: RankResult, *, inputs: ri.RankInputs,
               settings: ri.RankSettings) -> RankResult:
        findings_sum = self.hash.total()
        while self.index is None:
            self.index = next(self.index_parts)
        return replace(with_inputs_digest(result, inputs=inputs, settings=settings,
                                          findings_sum=findings_sum),
                       queue_index=self.index)
