"""Lost trace context (design formula 10) as reliability findings in the one findings table.

The trace aggregation and the sweep report what they saw — a caller's call to a traced
service whose server span started a new trace — and this module folds those sightings into
findings through findings_reconcile: occurrences add up, up to five examples are kept, and a
hop with no new sighting for TRUSTRANK_TRACE_BROKEN_CONTEXT_RESOLVE_HOURS resolves itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from trustrank.findings.choices import OPEN_STATES, FindingKind, FindingSource
from trustrank.findings.evidence import BROKEN_CONTEXT
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.reconcile import (
    FindingSpec,
    finding_fingerprint,
    findings_reconcile,
)
from trustrank.runtime.models import Service

MAX_EXAMPLES = 5


@dataclass
class BrokenSighting:
    """Lost context seen on one hop (service ids of one environment)."""

    caller_id: int
    callee_id: int
    count: int
    first: datetime
    last: datetime
    examples: list[dict[str, Any]] = field(default_factory=list)


def broken_context_fingerprint(
    *, environment: str, caller: tuple[str, str], callee: tuple[str, str]
) -> str:
    """(namespace, name) of both ends: stable across re-created service rows."""
    return finding_fingerprint(
        FindingKind.RELIABILITY, BROKEN_CONTEXT, environment, *caller, *callee
    )


def _merge(f: Finding, spec: FindingSpec) -> None:
    new = spec.values["evidence"]
    old = f.evidence or {}
    f.evidence = {
        **new,
        "occurrences": int(old.get("occurrences", 0)) + int(new.get("occurrences", 0)),
        "examples": [*old.get("examples", []), *new.get("examples", [])][:MAX_EXAMPLES],
    }
    f.service_id = spec.values["service_id"]
    if spec.first_seen is not None and spec.first_seen < f.first_seen:
        f.first_seen = spec.first_seen


def broken_context_record(*, sightings: Iterable[BrokenSighting], actor: Actor) -> int:
    """Fold sightings (any teams, any environments) into findings; returns occurrences."""
    items = list(sightings)
    if not items:
        return 0
    ids = {i.caller_id for i in items} | {i.callee_id for i in items}
    services = {
        s.pk: s
        for s in Service.objects.filter(pk__in=ids).select_related("environment").only(
            "pk", "name", "namespace", "environment__name", "environment__team_id"
        )
    }
    by_team: dict[int, list[FindingSpec]] = defaultdict(list)
    for item in items:
        caller, callee = services[item.caller_id], services[item.callee_id]
        env = callee.environment
        title = f"Lost trace context: {caller.name} → {callee.name}"
        by_team[env.team_id].append(
            FindingSpec(
                fingerprint=broken_context_fingerprint(
                    environment=env.name,
                    caller=(caller.namespace, caller.name),
                    callee=(callee.namespace, callee.name),
                ),
                title=title,
                severity="medium",
                category=BROKEN_CONTEXT,
                source=FindingSource.TRACES,
                values={
                    "environment": env.name,
                    "service_id": callee.pk,
                    "evidence": {
                        "caller": caller.name,
                        "caller_namespace": caller.namespace,
                        "callee": callee.name,
                        "callee_namespace": callee.namespace,
                        "occurrences": item.count,
                        "examples": item.examples[:MAX_EXAMPLES],
                    },
                },
                created_reason=(
                    f"{callee.name} started new traces while calls from {caller.name} to it "
                    f"were open ({item.count} seen)"
                ),
                first_seen=item.first,
                last_seen=item.last,
            )
        )
    for team_id, specs in sorted(by_team.items()):
        merged: dict[str, FindingSpec] = {}
        for spec in specs:  # one export may report one hop in several buckets
            if spec.fingerprint in merged:
                _merge_specs(merged[spec.fingerprint], spec)
            else:
                merged[spec.fingerprint] = spec
        findings_reconcile(
            team_id=team_id,
            kind=FindingKind.RELIABILITY,
            specs=merged.values(),
            existing=[],
            actor=actor,
            resolve_missing=False,
            merge=_merge,
            value_fields=["service", "environment", "first_seen"],
        )
    return sum(i.count for i in items)


def _merge_specs(into: FindingSpec, other: FindingSpec) -> None:
    a, b = into.values["evidence"], other.values["evidence"]
    a["occurrences"] += b["occurrences"]
    a["examples"] = [*a["examples"], *b["examples"]][:MAX_EXAMPLES]
    if other.first_seen and (into.first_seen is None or other.first_seen < into.first_seen):
        into.first_seen = other.first_seen
    if other.last_seen and (into.last_seen is None or other.last_seen > into.last_seen):
        into.last_seen = other.last_seen


def broken_context_resolve_stale(*, now: datetime) -> int:
    """Resolve lost-context findings with no sighting for the configured time: the hop now
    propagates context (or no longer runs). A new sighting reopens them."""
    cutoff = now - timedelta(hours=settings.TRUSTRANK_TRACE_BROKEN_CONTEXT_RESOLVE_HOURS)
    stale = Finding.objects.filter(
        kind=FindingKind.RELIABILITY,
        category=BROKEN_CONTEXT,
        state__in=OPEN_STATES,
        last_seen__lt=cutoff,
    )
    by_team: dict[int, list[Finding]] = defaultdict(list)
    for f in stale:
        by_team[f.team_id].append(f)
    resolved = 0
    for team_id, findings in sorted(by_team.items()):
        resolved += findings_reconcile(
            team_id=team_id,
            kind=FindingKind.RELIABILITY,
            specs=[],
            existing=findings,
            actor=Actor.system("trace sweep"),
            now=now,
            resolve_reason=lambda f: (
                f"no lost trace context seen on this hop since {f.last_seen:%Y-%m-%d %H:%M} UTC"
            ),
        ).resolved
    return resolved
