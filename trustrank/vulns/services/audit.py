"""Append-only audit events, shared by every kind of finding."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from trustrank.vulns.models import AuditEvent


@dataclass(frozen=True)
class Actor:
    """Who made a change: a person, an API key, or the system (with what it was doing)."""

    label: str
    user: Any = None

    @classmethod
    def system(cls, what: str) -> Actor:
        return cls(label=f"system: {what}")


def audit_event_record(
    *,
    team_id: int,
    subject_type: str,
    subject_id: int,
    action: str,
    actor: Actor,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason: str = "",
    at: datetime | None = None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        team_id=team_id,
        subject_type=subject_type,
        subject_id=subject_id,
        action=action,
        actor=actor.user if actor.user is not None and actor.user.is_authenticated else None,
        actor_label=actor.label[:160],
        before=before or {},
        after=after or {},
        reason=reason,
        created_at=at or timezone.now(),
    )


def audit_events_record_bulk(events: Iterable[AuditEvent]) -> int:
    rows = list(events)
    AuditEvent.objects.bulk_create(rows, batch_size=1000)
    return len(rows)
