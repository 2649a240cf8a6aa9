"""findings_reconcile: the one way every domain creates, updates, resolves and reopens its
findings from what its evidence calls for.

A domain computes specs — "these findings should exist now, with these values" — for a scope
it owns (one project version's vulnerabilities, one environment's certificate problems, the
lost trace context seen in one export) and hands them over with the findings that exist in
that scope. Reconciliation is set-based (bulk create, bulk update, one audit event per
change) and idempotent: the same specs twice change nothing the second time but `last_seen`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from trustrank.findings.choices import OPEN_STATES, Justification, TriageState, severity_score_for
from trustrank.findings.models import Finding, due_cache_fill
from trustrank.findings.services.audit import Actor, audit_events_record_bulk


def finding_fingerprint(*parts: object) -> str:
    """SHA-256 of the parts joined by the unit separator: stable across runs and versions."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


@dataclass(frozen=True)
class InitialTriage:
    """A state the evidence itself asserts when the finding is first created (an SBOM's VEX
    analysis); people's later changes always win over it."""

    state: str
    justification: str = ""
    response: tuple[str, ...] = ()
    detail: str = ""


@dataclass
class FindingSpec:
    """One finding the evidence calls for. `values` holds every other column to set (kind
    columns, references, `evidence`); severity_score follows `cvss_score` or the label."""

    fingerprint: str
    title: str
    severity: str
    category: str = ""
    source: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    initial: InitialTriage | None = None
    created_reason: str = ""
    reopened_reason: str = ""
    first_seen: datetime | None = None
    last_seen: datetime | None = None


@dataclass
class ReconcileCounts:
    created: int = 0
    updated: int = 0
    reopened: int = 0
    resolved: int = 0
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {
            "created": self.created,
            "updated": self.updated,
            "reopened": self.reopened,
            "resolved": self.resolved,
        }


def state_of(f: Finding) -> dict[str, Any]:
    """What an audit event records of a finding's triage: its VEX analysis, owner, due date
    and version (the version lets a page show what changed since the one it showed)."""
    return {
        "state": f.state,
        "justification": f.justification,
        "response": list(f.response or []),
        "detail": f.detail,
        "assignee": f.assignee_id,
        "due_date": f.due_date.isoformat() if f.due_date else None,
        "version": f.version,
    }


_BASE_FIELDS = ["title", "severity", "severity_score", "category", "source", "last_seen"]
_LIFECYCLE_FIELDS = ["state", "resolved_at", "auto_resolved", "updated_at", "version"]
# Triage columns people change while a reconcile runs: read again under the row lock.
_TRIAGE_FIELDS = [
    "state", "justification", "response", "detail", "resolved_at", "auto_resolved",
    "version", "assignee_id",
]


def _team_kind_lock(team_id: int, kind: str) -> None:
    # Two loads of one team may reconcile the same fingerprints at once (two trace exports
    # both seeing a lost context): serialise the write half per (team, kind) so neither
    # inserts a row the other is inserting. Held to the end of the caller's transaction.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"findings:{team_id}:{kind}"],
        )


def findings_reconcile(
    *,
    team_id: int,
    kind: str,
    specs: Iterable[FindingSpec],
    existing: Iterable[Finding],
    actor: Actor,
    now: datetime | None = None,
    resolve_missing: bool | Callable[[Finding], bool] = True,
    resolve_reason: Callable[[Finding], str] | None = None,
    merge: Callable[[Finding, FindingSpec], None] | None = None,
    value_fields: Iterable[str] = (),
) -> ReconcileCounts:
    """Bring the findings of one scope in line with `specs`.

    - a spec with no finding creates it (`created` event; `initial` sets its VEX state);
    - a spec with a finding updates its values and `last_seen`; an auto-resolved finding
      whose evidence is back is reopened (`reopened` event);
    - an open finding in `existing` with no spec is resolved when `resolve_missing` says so
      (`auto_resolved` event with `resolve_reason(finding)`). People's states other than the
      open ones are never touched.
    `merge(finding, spec)` replaces the plain value update (accumulating evidence);
    `value_fields` names the columns in specs' `values` to write on update.
    """
    now = now or timezone.now()
    counts = ReconcileCounts()
    wanted = {s.fingerprint: s for s in specs}
    fields = list(dict.fromkeys([*_BASE_FIELDS, *value_fields]))
    with transaction.atomic():
        _team_kind_lock(team_id, kind)
        by_fp = {f.fingerprint: f for f in existing}
        missing = [fp for fp in wanted if fp not in by_fp]
        if missing:
            # The caller's scope may not hold every finding of these fingerprints (a finding
            # created by an earlier export of another scope): look them up by the unique key.
            for f in Finding.objects.filter(team_id=team_id, fingerprint__in=missing):
                by_fp[f.fingerprint] = f
        _lock_and_refresh_triage(by_fp.values())
        to_create: list[Finding] = []
        to_update: list[Finding] = []
        events = []
        for fp, spec in wanted.items():
            found = by_fp.get(fp)
            if found is None:
                to_create.append(_new_finding(team_id=team_id, kind=kind, spec=spec, now=now))
                continue
            f = found
            f.title, f.severity = spec.title, spec.severity
            f.category = spec.category or f.category
            f.source = spec.source or f.source
            if merge is not None:
                merge(f, spec)
            else:
                for name, value in spec.values.items():
                    setattr(f, name, value)
            f.severity_score = severity_score_for(f.severity, getattr(f, "cvss_score", None))
            f.last_seen = max(f.last_seen, spec.last_seen or now)
            f.updated_at = now
            to_update.append(f)
            if f.auto_resolved and f.state == TriageState.RESOLVED:
                before = state_of(f)
                f.state, f.resolved_at, f.auto_resolved = TriageState.IN_TRIAGE, None, False
                f.version += 1
                counts.reopened += 1
                events.append(
                    actor.event(
                        action="reopened",
                        team_id=team_id,
                        finding_id=f.pk,
                        environment=f.environment,
                        before=before,
                        after=state_of(f),
                        reason=spec.reopened_reason or "the evidence for it is back",
                        at=now,
                    )
                )
        for fp, f in by_fp.items():
            if fp in wanted or f.state not in OPEN_STATES:
                continue
            if not (resolve_missing(f) if callable(resolve_missing) else resolve_missing):
                continue
            before = state_of(f)
            f.state, f.resolved_at, f.auto_resolved, f.updated_at = (
                TriageState.RESOLVED, now, True, now,
            )
            f.version += 1
            to_update.append(f)
            counts.resolved += 1
            events.append(
                actor.event(
                    action="auto_resolved",
                    team_id=team_id,
                    finding_id=f.pk,
                    environment=f.environment,
                    before=before,
                    after=state_of(f),
                    reason=resolve_reason(f) if resolve_reason else "the evidence is gone",
                    at=now,
                )
            )
        due_cache_fill(to_create, known=False)
        Finding.objects.bulk_create(to_create, batch_size=500)
        for f in to_create:
            spec = wanted[f.fingerprint]
            events.append(
                actor.event(
                    action="created",
                    team_id=team_id,
                    finding_id=f.pk,
                    environment=f.environment,
                    after={**state_of(f), "severity": f.severity, "title": f.title[:500]},
                    reason=spec.created_reason or f.title,
                    at=now,
                )
            )
        if to_update:
            update_fields = [*fields, *_LIFECYCLE_FIELDS]
            if merge is not None:
                update_fields.append("evidence")
            Finding.objects.bulk_update(
                to_update, list(dict.fromkeys(update_fields)), batch_size=500
            )
        audit_events_record_bulk(events)
        counts.created = len(to_create)
        counts.updated = len(to_update) - counts.resolved
        counts.findings = [*to_create, *to_update]
    return counts


def _lock_and_refresh_triage(findings: Iterable[Finding]) -> None:
    """Lock the rows this reconcile may write (in id order, as bulk triage does, so the two
    never deadlock) and take their triage columns as they are now: `existing` was read
    before, and writing it back as read would undo an analyst's change made in between."""
    by_pk = {f.pk: f for f in findings if f.pk is not None}
    if not by_pk:
        return
    ids = sorted(by_pk)
    for i in range(0, len(ids), 5000):
        rows = (
            Finding.objects.select_for_update()
            .filter(pk__in=ids[i : i + 5000])
            .order_by("pk")
            .values_list("pk", *_TRIAGE_FIELDS)
        )
        for pk, *values in rows:
            f = by_pk[pk]
            for name, value in zip(_TRIAGE_FIELDS, values, strict=True):
                setattr(f, name, value)
    # Their due dates, which the audit events record (state_of).
    due_cache_fill(by_pk.values())


def _new_finding(*, team_id: int, kind: str, spec: FindingSpec, now: datetime) -> Finding:
    f = Finding(
        team_id=team_id,
        kind=kind,
        category=spec.category,
        source=spec.source,
        fingerprint=spec.fingerprint,
        title=spec.title,
        severity=spec.severity,
        first_seen=spec.first_seen or now,
        last_seen=spec.last_seen or now,
        **{k: v for k, v in spec.values.items() if k not in ("severity", "title")},
    )
    f.severity_score = severity_score_for(f.severity, f.cvss_score)
    if spec.initial is not None:
        f.state = spec.initial.state
        f.justification = (
            spec.initial.justification
            if spec.initial.justification in Justification.values
            else ""
        )
        f.response = list(spec.initial.response)
        f.detail = spec.initial.detail
        if f.state not in OPEN_STATES:
            f.resolved_at = now
    return f
