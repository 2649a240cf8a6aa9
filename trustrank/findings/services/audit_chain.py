"""Verify an audit hash chain: one team's events (or the site-wide ones) in id order, each
digest recomputed from the event's content and each link checked against its predecessor.

Streams the chain through a server-side cursor, so memory stays flat at millions of events.
Exports put `audit_chain_verify(team_id=…).as_dict()` beside what they export.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from django.db import connection, transaction

from trustrank.findings.services.audit import DIGEST_FIELDS, audit_content_digest

_CHUNK = 2000


@dataclass(frozen=True)
class ChainReport:
    """The outcome of one chain's verification. `head_digest` is the stored digest of the last
    event: compare it with an earlier report's to see that nothing was cut off the end."""

    intact: bool
    events: int
    first_broken_id: int | None
    reason: str
    head_digest: str
    head_event_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The chain read as plain rows (a model instance per event costs more than its digest):
# created_at formatted by PostgreSQL as audit._iso does, JSON decoded here.
_CHAIN_SQL = """
SELECT id, team_id, finding_id, subject_type, subject_id, environment, action, actor_kind,
       actor_label, actor_user_id, actor_key_id, before::text, after::text, reason,
       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
       prev_digest, digest
FROM findings_auditevent WHERE {where} ORDER BY id
"""


def audit_chain_verify(*, team_id: int | None, upto_id: int | None = None) -> ChainReport:
    """Check the chain of `team_id` (None: the site-wide chain), or its events up to id
    `upto_id` only (as a checkpoint saw it). The first event's predecessor is the empty
    string; every later one names the digest stored on the event before it; every stored
    digest is the digest of the event's content. Reports the first event that fails."""
    events = 0
    prev = ""
    head = ""
    head_id: int | None = None
    first_broken_id: int | None = None
    reason = ""
    where = "team_id IS NULL" if team_id is None else "team_id = %s"
    params: list[int] = [] if team_id is None else [team_id]
    if upto_id is not None:
        where += " AND id <= %s"
        params.append(upto_id)
    # A named (server-side) cursor streams the chain in chunks, inside one transaction (one
    # snapshot) so no event committed meanwhile is seen half-way.
    with transaction.atomic(), connection.chunked_cursor() as cur:
        cur.cursor.itersize = _CHUNK
        cur.execute(_CHAIN_SQL.format(where=where), params)
        for row in cur:
            events += 1
            pk, digest = row[0], row[-1]
            if first_broken_id is None:
                content = dict(zip(DIGEST_FIELDS, row[1:-1], strict=True))
                problem = _link_problem(pk, content, digest, prev)
                if problem:
                    first_broken_id, reason = pk, problem
            prev = head = digest
            head_id = pk
    return ChainReport(
        intact=first_broken_id is None,
        events=events,
        first_broken_id=first_broken_id,
        reason=reason,
        head_digest=head,
        head_event_id=head_id,
    )


def _link_problem(pk: int, content: dict[str, Any], digest: str, prev: str) -> str:
    if not digest:
        return f"event {pk} has no digest"
    if content["prev_digest"] != prev:
        if not prev:
            return f"event {pk} names a predecessor, but none precedes it (events removed)"
        return (
            f"event {pk} does not follow the event before it "
            "(an event was removed, inserted or re-sealed)"
        )
    # The standard library's decoder, as Django's JSONField uses: orjson would read integers
    # past 64 bits as floats.
    content["before"] = json.loads(content["before"])
    content["after"] = json.loads(content["after"])
    if audit_content_digest(content) != digest:
        return f"event {pk} was changed after it was written (its digest does not match)"
    return ""
