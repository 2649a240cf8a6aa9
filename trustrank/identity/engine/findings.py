"""The findings identity facts imply: of a certificate (expired, expiring, weak, chain invalid),
of a trust anchor, of an unmapped identity and of a call that breaks its callee's policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trustrank.identity.engine.chain import ChainStatus
from trustrank.identity.engine.edges import ObservedEdge
from trustrank.identity.engine.expiry import (
    ExpiryRules,
    expiry_warning,
    rotation_observed,
    superseded_by,
    time_left,
)
from trustrank.identity.engine.strength import Weakness


@dataclass(frozen=True)
class FindingSpec:
    kind: str
    key: str  # unique within (team, environment, kind)
    severity: str  # low, medium, high, critical
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CertificateFacts:
    fingerprint_sha256: str
    subject: str
    spiffe_id: str | None
    role: str  # leaf or ca
    not_after: datetime
    chain_status: str
    chain_reason: str
    weaknesses: tuple[Weakness, ...]
    not_before: datetime | None = None
    # The (not_before, not_after) of every certificate of the same identity in the
    # environment, this one included (`rotation_observed` reads the cadence from them).
    history: tuple[tuple[datetime, datetime], ...] = ()


def certificate_findings(
    cert: CertificateFacts, *, now: datetime, expiry_window: timedelta,
    expiry: ExpiryRules | None = None,
) -> list[FindingSpec]:
    """What is wrong with one certificate, as findings keyed by its fingerprint."""
    label = cert.spiffe_id or cert.subject or cert.fingerprint_sha256[:16]
    base = {
        "fingerprint_sha256": cert.fingerprint_sha256,
        "subject": cert.subject,
        "spiffe_id": cert.spiffe_id,
        "not_after": cert.not_after.isoformat(),
        "chain_status": cert.chain_status,
    }
    specs: list[FindingSpec] = []
    rules = expiry or ExpiryRules()
    # Earlier certificates only: the cadence up to this one.
    earlier = tuple(v for v in cert.history
                    if cert.not_before is None or v[0] <= cert.not_before)
    rotation = rotation_observed(earlier, min_rotations=rules.min_rotations)
    if superseded_by(cert.not_before, cert.not_after, cert.history) is not None:
        # Replaced before it expired: its expiry is the rotation working, not a problem.
        pass
    elif cert.not_after <= now:
        specs.append(
            FindingSpec(
                "expired", cert.fingerprint_sha256, "high",
                f"Certificate for {label} expired on {cert.not_after:%Y-%m-%d}", base,
            )
        )
    else:
        warn = expiry_warning(not_before=cert.not_before, not_after=cert.not_after, now=now,
                              window=expiry_window, rules=rules, rotation=rotation)
        if warn is not None:
            days = (cert.not_after - now).days
            severity = "high" if days <= 7 or warn["rotation_missed"] else "medium"
            specs.append(
                FindingSpec(
                    "expiring", cert.fingerprint_sha256, severity,
                    f"Certificate for {label} expires in {time_left(cert.not_after - now)} "
                    f"({cert.not_after:%Y-%m-%d}); {warn['explanation']}",
                    {**base, "days_left": days, "window_days": expiry_window.days,
                     **{k: v for k, v in warn.items() if k != "explanation"},
                     "explanation": warn["explanation"]},
                )
            )
    for weakness in cert.weaknesses:
        specs.append(
            FindingSpec(
                weakness.kind, cert.fingerprint_sha256, "medium",
                f"Weak {'key' if weakness.kind == 'weak_key' else 'signature'} on {label}: "
                f"{weakness.detail}",
                {**base, "detail": weakness.detail},
            )
        )
    if cert.chain_status in (ChainStatus.INVALID, ChainStatus.UNTRUSTED, ChainStatus.SELF_SIGNED):
        severity = "high" if cert.spiffe_id else "medium"
        claim = " claims a SPIFFE ID but" if cert.spiffe_id else ""
        specs.append(
            FindingSpec(
                "chain_invalid", cert.fingerprint_sha256, severity,
                f"Certificate for {label}{claim} does not chain to the trust bundle: "
                f"{cert.chain_reason}",
                {**base, "reason": cert.chain_reason},
            )
        )
    return specs


@dataclass(frozen=True)
class AnchorFacts:
    fingerprint_sha256: str
    subject: str
    not_after: datetime


def anchor_findings(
    anchor: AnchorFacts, *, environment: str, now: datetime, expiry_window: timedelta
) -> list[FindingSpec]:
    """A trust-bundle anchor past (or near) its end: every chain through it stops verifying
    then, so each identity it vouches for falls to 0 at once. Keyed by its fingerprint."""
    label = anchor.subject or anchor.fingerprint_sha256[:16]
    evidence = {
        "fingerprint_sha256": anchor.fingerprint_sha256,
        "subject": anchor.subject,
        "not_after": anchor.not_after.isoformat(),
        "environment": environment,
    }
    if anchor.not_after <= now:
        return [
            FindingSpec(
                "anchor_expired", anchor.fingerprint_sha256, "high",
                f"Trust anchor {label} of the {environment} bundle expired on "
                f"{anchor.not_after:%Y-%m-%d}: certificates chaining to it no longer verify",
                evidence,
            )
        ]
    if anchor.not_after <= now + expiry_window:
        days = (anchor.not_after - now).days
        return [
            FindingSpec(
                "anchor_expiring", anchor.fingerprint_sha256, "high" if days <= 7 else "medium",
                f"Trust anchor {label} of the {environment} bundle expires in {days} "
                f"day{'' if days == 1 else 's'} ({anchor.not_after:%Y-%m-%d})",
                {**evidence, "days_left": days, "window_days": expiry_window.days},
            )
        ]
    return []


def unmapped_identity_finding(*, spiffe_id: str) -> FindingSpec:
    return FindingSpec(
        "unmapped", spiffe_id, "low",
        f"Identity {spiffe_id} is not mapped to any service",
        {"spiffe_id": spiffe_id},
    )


def policy_finding(edge: ObservedEdge, reasons: list[str]) -> FindingSpec:
    key = (
        f"{edge.caller_namespace}/{edge.caller_service}->{edge.callee_namespace}/"
        f"{edge.callee_service}|{edge.caller_spiffe_id or '-'}|{'mtls' if edge.mtls else 'plain'}"
    )
    return FindingSpec(
        "policy_violation", key, "high",
        f"Call {edge.caller_service} -> {edge.callee_service} violates the callee's policy",
        {
            "caller_service": edge.caller_service,
            "callee_service": edge.callee_service,
            "caller_namespace": edge.caller_namespace,
            "callee_namespace": edge.callee_namespace,
            "caller_spiffe_id": edge.caller_spiffe_id,
            "mtls": edge.mtls,
            "reasons": reasons,
        },
    )
