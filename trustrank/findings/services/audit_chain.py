"""Verify an audit hash chain: one team's events (or the site-wide ones) in id order, each
digest recomputed from the event's content and each link checked against its predecessor.

Streams the chain through a server-side cursor, so memory stays flat at millions of events.
Exports put `audit_chain_verify(team_id=…).as_dict()` beside what they export.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trustrank.findings.models import AuditEvent
from trustrank.findings.services.audit import audit_chain_of, audit_event_digest

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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def audit_chain_verify(*, team_id: int | None) -> ChainReport:
    """Check the chain of `team_id` (None: the site-wide chain). The first event's predecessor
    is the empty string; every later one names the digest stored on the event before it; every
    stored digest is the digest of the event's content. Reports the first event that fails."""
    events = 0
    prev = ""
    head = ""
    first_broken_id: int | None = None
    reason = ""
    qs = AuditEvent.objects.filter(audit_chain_of(team_id)).order_by("id")
    for event in qs.iterator(chunk_size=_CHUNK):
        events += 1
        if first_broken_id is None:
            problem = _link_problem(event, prev)
            if problem:
                first_broken_id, reason = event.pk, problem
        prev = head = event.digest
    return ChainReport(
        intact=first_broken_id is None,
        events=events,
        first_broken_id=first_broken_id,
        reason=reason,
        head_digest=head,
    )


def _link_problem(event: AuditEvent, prev: str) -> str:
    if not event.digest:
        return f"event {event.pk} has no digest"
    if event.prev_digest != prev:
        if not prev:
            return f"event {event.pk} names a predecessor, but none precedes it (events removed)"
        return (
            f"event {event.pk} does not follow the event before it "
            "(an event was removed, inserted or re-sealed)"
        )
    if audit_event_digest(event) != event.digest:
        return f"event {event.pk} was changed after it was written (its digest does not match)"
    return ""
