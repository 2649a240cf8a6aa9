"""Append-only audit events, shared by every kind of finding and every triage-like change."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.models import ActorKind, AuditEvent


@dataclass(frozen=True)
class Actor:
    """Who made a change: a person, an API key, or the system (with what it was doing)."""

    label: str
    kind: str = ActorKind.SYSTEM
    user: Any = None
    api_key_id: int | None = None

    @classmethod
    def system(cls, what: str) -> Actor:
        return cls(label=f"system: {what}"[:160], kind=ActorKind.SYSTEM)

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        if principal.api_key is not None:
            return cls(
                label=principal.label[:160], kind=ActorKind.API_KEY, api_key_id=principal.api_key.pk
            )
        if principal.user is not None and principal.user.is_authenticated:
            return cls(label=principal.label[:160], kind=ActorKind.USER, user=principal.user)
        return cls.system(principal.label)

    def event(
        self,
        *,
        action: str,
        team_id: int | None,
        finding_id: int | None = None,
        subject_type: str = "",
        subject_id: str = "",
        environment: str = "",
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        reason: str = "",
        at: datetime | None = None,
    ) -> AuditEvent:
        """An unsaved event by this actor (for bulk writes)."""
        return AuditEvent(
            team_id=team_id,
            finding_id=finding_id,
            subject_type=subject_type,
            subject_id=subject_id[:255],
            environment=environment[:120],
            action=action,
            actor_kind=self.kind,
            actor_user=self.user,
            actor_key_id=self.api_key_id,
            actor_label=self.label[:160],
            before=before or {},
            after=after or {},
            reason=reason,
            created_at=at or timezone.now(),
        )


def audit_event_record(
    *,
    actor: Actor,
    action: str,
    team_id: int | None,
    finding_id: int | None = None,
    subject_type: str = "",
    subject_id: str = "",
    environment: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason: str = "",
    at: datetime | None = None,
) -> AuditEvent:
    event = actor.event(
        action=action,
        team_id=team_id,
        finding_id=finding_id,
        subject_type=subject_type,
        subject_id=subject_id,
        environment=environment,
        before=before,
        after=after,
        reason=reason,
        at=at,
    )
    event.save(force_insert=True)
    return event


def audit_events_record_bulk(events: Iterable[AuditEvent]) -> int:
    rows = list(events)
    AuditEvent.objects.bulk_create(rows, batch_size=1000)
    return len(rows)
