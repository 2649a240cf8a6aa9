"""Append-only audit events, shared by every kind of finding and every triage-like change.

Every event is a link in a hash chain of its team (site-wide events, team null, form a chain of
their own): it stores the digest of the team's previous event and its own digest over its
content and that predecessor (`audit_event_digest`). Writers take a per-team advisory lock
before reading the predecessor and keep it to the end of their transaction, so two writers
never both append to the same predecessor (no fork) and the chain's order is the order of ids.
`trustrank.findings.services.audit_chain.audit_chain_verify` checks a chain.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import ActorKind
from trustrank.findings.records import AuditEvent
from trustrank.lib.locks import advisory_xact_lock

# Namespace of the (int, int) advisory lock that orders one team's chain; the second key is
# the team id, or 0 for the site-wide chain (team ids start at 1).
AUDIT_CHAIN_LOCK = 0x41554454  # "AUDT"
SITE_CHAIN = 0


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

    @classmethod
    def of_job(cls, job: Any, *, what: str = "job") -> Actor:
        """Who asked for a job (its `requested_by_*` columns): what the job changes is theirs,
        though a worker does it."""
        if job.requested_by_key_id is not None:
            return cls(label=job.requested_by_label, kind=ActorKind.API_KEY,
                       api_key_id=job.requested_by_key_id)
        if job.requested_by_user_id is not None:
            return cls(label=job.requested_by_label, kind=ActorKind.USER,
                       user=job.requested_by_user)
        return cls.system(job.requested_by_label or what)

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


# --- the hash chain -------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """A JSON value as PostgreSQL's jsonb gives it back, so that what is stored and what was
    digested are the same: jsonb prints a number written in exponent form in full (1e+16
    comes back as 10000000000000000, read as an int) and has no negative zero. Writers store
    the normalised value; verification then reads it as it is."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1e16:
            return int(value)
        return 0.0 if value == 0 else value
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _iso(at: datetime) -> str:
    if timezone.is_naive(at):
        at = timezone.make_aware(at)
    return at.astimezone(UTC).isoformat(timespec="microseconds")


# The columns a digest covers, in the order audit_chain reads them.
DIGEST_FIELDS = (
    "team",
    "finding",
    "subject_type",
    "subject_id",
    "environment",
    "action",
    "actor_kind",
    "actor_label",
    "actor_user",
    "actor_key",
    "before",
    "after",
    "reason",
    "created_at",
    "prev_digest",
)


def audit_event_content(event: AuditEvent) -> dict[str, Any]:
    """What an event's digest covers: everything it says, and its predecessor's digest."""
    return {
        "team": event.team_id,
        "finding": event.finding_id,
        "subject_type": event.subject_type,
        "subject_id": str(event.subject_id),
        "environment": event.environment,
        "action": event.action,
        "actor_kind": event.actor_kind,
        "actor_label": event.actor_label,
        "actor_user": event.actor_user_id,
        "actor_key": event.actor_key_id,
        "before": event.before,
        "after": event.after,
        "reason": event.reason,
        "created_at": _iso(event.created_at),
        "prev_digest": event.prev_digest,
    }


def audit_content_digest(content: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of an event's content (DIGEST_FIELDS; `created_at`
    as ISO 8601 in UTC with microseconds, `before`/`after` as decoded JSON): keys sorted, no
    spaces, UTF-8 unescaped."""
    canonical = json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def audit_event_digest(event: AuditEvent) -> str:
    """The digest of an event (saved or not). The same function verifies and writes."""
    return audit_content_digest(audit_event_content(event))


def audit_chain_of(team_id: int | None) -> Q:
    """The events of one chain: a team's, or the site-wide ones (team null)."""
    return Q(team__isnull=True) if team_id is None else Q(team_id=team_id)


def audit_chain_lock(team_id: int | None) -> None:
    """Serialise appends to one team's chain until the current transaction ends."""
    advisory_xact_lock(AUDIT_CHAIN_LOCK, SITE_CHAIN if team_id is None else team_id)


def audit_chain_head(team_id: int | None) -> str:
    """The digest of the team's last event ('' for an empty chain). Call under the lock."""
    last = (
        AuditEvent.objects.filter(audit_chain_of(team_id))
        .order_by("-id")
        .values_list("digest", flat=True)
    )[:1]
    return next(iter(last), "")


def _chain_append(team_id: int | None, events: list[AuditEvent]) -> None:
    # The lock is taken before the predecessor is read and held to commit: a second writer of
    # this team waits here and then reads our last event as its predecessor. Ids come from one
    # sequence after the lock, so id order is chain order.
    audit_chain_lock(team_id)
    prev = audit_chain_head(team_id)
    for event in events:
        # Stored as jsonb will give it back (tuples as lists, numbers as jsonb spells them).
        event.before = _json_value(json.loads(json.dumps(event.before, allow_nan=False)))
        event.after = _json_value(json.loads(json.dumps(event.after, allow_nan=False)))
        event.prev_digest = prev
        event.digest = audit_event_digest(event)
        prev = event.digest
    AuditEvent.objects.bulk_create(events, batch_size=1000)


# --- writes -----------------------------------------------------------------------------------


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
    with transaction.atomic():
        _chain_append(team_id, [event])
    return event


def audit_events_record_bulk(events: Iterable[AuditEvent]) -> int:
    """Append unsaved events (from `Actor.event`) in the order given, each to its team's chain.
    Teams are locked in id order (the site-wide chain first), so two bulk writers over the
    same teams cannot deadlock on each other."""
    rows = list(events)
    by_team: dict[int | None, list[AuditEvent]] = defaultdict(list)
    for event in rows:
        by_team[event.team_id].append(event)
    with transaction.atomic():
        for team_id in sorted(by_team, key=lambda t: -1 if t is None else t):
            _chain_append(team_id, by_team[team_id])
    return len(rows)
