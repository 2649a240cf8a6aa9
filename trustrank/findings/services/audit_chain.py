"""PROVISIONAL (replace at merge): the audit hash chain's verification, written by the exports
work only so it can call `audit_chain_verify(team_id=…).as_dict()` before the real module
lands. It checks the links (each event's `prev_digest` is its predecessor's `digest`), not the
content digests, whose recipe belongs to the real module."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trustrank.findings.models import AuditEvent


@dataclass(frozen=True)
class AuditChainReport:
    intact: bool
    events: int
    first_broken_id: int | None
    reason: str
    head_digest: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def audit_chain_verify(*, team_id: int | None) -> AuditChainReport:
    events_of = (
        AuditEvent.objects.filter(team__isnull=True)
        if team_id is None
        else AuditEvent.objects.filter(team_id=team_id)
    )
    rows = (
        events_of.order_by("created_at", "id")
        .values_list("id", "prev_digest", "digest")
        .iterator(chunk_size=5000)
    )
    events = 0
    previous = ""
    for event_id, prev_digest, digest in rows:
        events += 1
        if (prev_digest or digest) and prev_digest != previous:
            return AuditChainReport(
                intact=False,
                events=events,
                first_broken_id=event_id,
                reason="prev_digest does not match the previous event's digest",
                head_digest=previous,
            )
        previous = digest
    return AuditChainReport(
        intact=True, events=events, first_broken_id=None, reason="", head_digest=previous
    )
