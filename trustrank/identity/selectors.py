"""Reads for identity evidence; every one is scoped to the principal's teams."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES, FindingKind
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.identity.engine import EndpointEvidence
from trustrank.identity.models import (
    Certificate,
    Identity,
    Role,
    ServicePolicy,
    TrustBundle,
)


def certificate_list(*, principal: Principal) -> QuerySet[Certificate]:
    return (
        Certificate.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .defer("der")
        .order_by("not_after", "pk")
    )


def certificate_get(*, principal: Principal, certificate_id: int) -> Certificate:
    """The one access helper for a certificate: 404 outside the principal's teams."""
    cert = (
        Certificate.objects.filter(team_id__in=principal.team_ids, pk=certificate_id)
        .select_related("team")
        .first()
    )
    if cert is None:
        raise Http404("No such certificate.")
    return cert


def identity_list(*, principal: Principal) -> QuerySet[Identity]:
    return (
        Identity.objects.filter(team_id__in=principal.team_ids)
        .select_related("team", "best_certificate")
        .order_by("environment", "spiffe_id")
    )


def identity_get(*, principal: Principal, identity_id: int) -> Identity:
    identity = identity_list(principal=principal).filter(pk=identity_id).first()
    if identity is None:
        raise Http404("No such identity.")
    return identity


def identity_certificates(*, identity: Identity) -> QuerySet[Certificate]:
    return Certificate.objects.filter(
        team_id=identity.team_id, environment=identity.environment, spiffe_id=identity.spiffe_id
    ).defer("der").order_by("-not_after")


def finding_list(*, principal: Principal) -> QuerySet[Finding]:
    """Identity findings from the one findings table, open first, newest evidence first."""
    return (
        Finding.objects.filter(team_id__in=principal.team_ids, kind=FindingKind.IDENTITY)
        .select_related("team", "certificate")
        .defer("certificate__der")
        .annotate(is_resolved=~Q(state__in=OPEN_STATES))
        .order_by("is_resolved", "-last_seen", "pk")
    )


def certificate_findings(*, certificate: Certificate) -> QuerySet[Finding]:
    return (
        Finding.objects.filter(certificate=certificate, team_id=certificate.team_id)
        .annotate(is_resolved=~Q(state__in=OPEN_STATES))
        .order_by("is_resolved", "category")
    )


def audit_events(*, principal: Principal, environment: str) -> QuerySet[AuditEvent]:
    """Identity events of one environment: findings of kind identity, mappings, policies."""
    return (
        AuditEvent.objects.filter(team_id__in=principal.team_ids, environment=environment)
        .filter(
            Q(finding__kind=FindingKind.IDENTITY)
            | Q(subject_type__in=["identity.mapping", "identity.policy"])
        )
        .select_related("finding")
        .order_by("-created_at", "-pk")
    )


def bundle_list(*, principal: Principal) -> QuerySet[TrustBundle]:
    return (
        TrustBundle.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .prefetch_related("anchors")
    )


def bundle_get(*, principal: Principal, environment: str) -> TrustBundle:
    bundle = bundle_list(principal=principal).filter(environment=environment).first()
    if bundle is None:
        raise Http404(f"No trust bundle for environment {environment!r}.")
    return bundle


def policy_list(*, principal: Principal) -> QuerySet[ServicePolicy]:
    return ServicePolicy.objects.filter(team_id__in=principal.team_ids).select_related("team")


def environment_names(*, principal: Principal) -> list[str]:
    """Every environment the principal's teams hold certificates or bundles for."""
    names = set(
        Certificate.objects.filter(team_id__in=principal.team_ids)
        .values_list("environment", flat=True)
        .distinct()
    )
    names |= set(
        TrustBundle.objects.filter(team_id__in=principal.team_ids).values_list(
            "environment", flat=True
        )
    )
    return sorted(names)


@dataclass(frozen=True)
class TimelineBucket:
    start: datetime
    end: datetime
    count: int
    labels: tuple[str, ...]


def expiry_timeline(
    *, principal: Principal, environment: str, days: int = 90, bucket_days: int = 7,
    now: datetime | None = None,
) -> list[TimelineBucket]:
    """Leaf certificates expiring in the next `days`, per bucket of `bucket_days`."""
    now = now or timezone.now()
    end = now + timedelta(days=days)
    rows = list(
        Certificate.objects.filter(
            team_id__in=principal.team_ids, environment=environment, role=Role.LEAF,
            not_after__gt=now, not_after__lte=end,
        ).values_list("not_after", "spiffe_id", "subject")
    )
    buckets: list[TimelineBucket] = []
    start = now
    while start < end:
        stop = min(start + timedelta(days=bucket_days), end)
        inside = [r for r in rows if start < r[0] <= stop]
        buckets.append(
            TimelineBucket(
                start=start, end=stop, count=len(inside),
                labels=tuple(sorted(sid or subject for _, sid, subject in inside)),
            )
        )
        start = stop
    return buckets


def identity_edge_evidence(
    *, team_id: int, environment: str, spiffe_id: str | None, mtls: bool
) -> EndpointEvidence:
    """One end of a call edge, for `engine.edge_identity_strength` (used by the graph)."""
    strength = 0
    if spiffe_id and mtls:
        identity = Identity.objects.filter(
            team_id=team_id, environment=environment, spiffe_id=spiffe_id
        ).first()
        if identity is not None and identity.best_certificate_id is not None:
            strength = identity.strength
    return EndpointEvidence(mtls=mtls, spiffe_id=spiffe_id, strength=strength)


def open_findings(*, principal: Principal, environment: str) -> QuerySet[Finding]:
    return finding_list(principal=principal).filter(
        environment=environment, state__in=OPEN_STATES
    )


