"""Identity findings: the desired set from the engine, reconciled into the one Finding model."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from trustrank.findings.choices import FindingKind, FindingSource
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor
from trustrank.findings.services.reconcile import FindingSpec as UnifiedSpec
from trustrank.findings.services.reconcile import finding_fingerprint, findings_reconcile
from trustrank.identity import engine
from trustrank.identity.engine import FindingSpec
from trustrank.identity.models import (
    Certificate,
    Identity,
    IdentityCategory,
    MappingSource,
    TrustAnchor,
)
from trustrank.identity.services.environments import expiry_rules, expiry_window

_ANCHOR_FINDING_KINDS = (IdentityCategory.ANCHOR_EXPIRED, IdentityCategory.ANCHOR_EXPIRING)
_CERT_FINDING_KINDS = (
    IdentityCategory.EXPIRED,
    IdentityCategory.EXPIRING,
    IdentityCategory.WEAK_KEY,
    IdentityCategory.WEAK_SIGNATURE,
    IdentityCategory.CHAIN_INVALID,
)


SEVERITY_LABELS = {"low", "medium", "high", "critical"}


@dataclass
class _Desired:
    spec: FindingSpec
    certificate_id: int | None
    spiffe_id: str


def identity_finding_fingerprint(*, environment: str, category: str, key: str) -> str:
    # Keys longer than 255 characters are hashed first, as the former identity findings
    # table stored them, so findings moved from it keep their fingerprints.
    if len(key) > 255:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return finding_fingerprint(FindingKind.IDENTITY, environment, category, key)


def _specs(environment: str, desired: list[_Desired]) -> list[UnifiedSpec]:
    out = []
    for item in desired:
        spec = item.spec
        values: dict[str, Any] = {
            "environment": environment,
            "evidence": spec.evidence,
            "spiffe_id": item.spiffe_id,
        }
        if item.certificate_id is not None:
            values["certificate_id"] = item.certificate_id
        out.append(
            UnifiedSpec(
                fingerprint=identity_finding_fingerprint(
                    environment=environment, category=spec.kind, key=spec.key
                ),
                title=spec.title,
                severity=spec.severity if spec.severity in SEVERITY_LABELS else "unknown",
                category=spec.kind,
                source=(
                    FindingSource.POLICY
                    if spec.kind == IdentityCategory.POLICY_VIOLATION
                    else FindingSource.CERTIFICATE
                ),
                values=values,
                created_reason=spec.title,
            )
        )
    return out


def _identity_ids(*, team_id: int, environment: str, specs: list[UnifiedSpec]) -> None:
    """Point each finding at its Identity row when its SPIFFE ID has one."""
    wanted = {s.values["spiffe_id"] for s in specs if s.values.get("spiffe_id")}
    if not wanted:
        return
    ids = dict(
        Identity.objects.filter(
            team_id=team_id, environment=environment, spiffe_id__in=wanted
        ).values_list("spiffe_id", "pk")
    )
    for s in specs:
        if s.values.get("spiffe_id") in ids:
            s.values["identity_id"] = ids[s.values["spiffe_id"]]


def _reconcile(
    *,
    team_id: int,
    environment: str,
    desired: list[_Desired],
    existing: Iterable[Finding],
    resolve_missing: bool,
    now: datetime,
    actor: Actor,
) -> dict[str, int]:
    specs = _specs(environment, desired)
    _identity_ids(team_id=team_id, environment=environment, specs=specs)
    counts = findings_reconcile(
        team_id=team_id,
        kind=FindingKind.IDENTITY,
        specs=specs,
        existing=existing,
        actor=actor,
        now=now,
        resolve_missing=resolve_missing,
        resolve_reason=lambda f: f"{f.title}: no longer observed",
        value_fields=["environment", "evidence", "spiffe_id", "certificate", "identity"],
    )
    return {"opened": counts.created + counts.reopened, "resolved": counts.resolved}


def _identity_findings(*, team_id: int, environment: str) -> QuerySet[Finding]:
    return Finding.objects.filter(
        team_id=team_id, kind=FindingKind.IDENTITY, environment=environment
    )


def findings_sync(
    *,
    team_id: int,
    environment: str,
    now: datetime,
    certificate_ids: Sequence[int] | None = None,
    spiffe_ids: Iterable[str] | None = None,
    actor: Actor | None = None,
) -> dict[str, int]:
    """Make the open certificate and mapping findings match the evidence (all of the
    environment, or the certificates and identities named). Idempotent."""
    actor = actor or Actor.system("identity evidence")
    window = expiry_window()
    rules = expiry_rules()
    certs = Certificate.objects.filter(team_id=team_id, environment=environment)
    if certificate_ids is not None:
        # The certificates named, and the earlier ones of their SPIFFE IDs: a successor
        # uploaded makes its predecessor's expiry routine (engine.expiry).
        named = list(certs.filter(pk__in=certificate_ids).values_list("pk", "spiffe_id"))
        same_ids = {spiffe for _pk, spiffe in named if spiffe}
        certs = certs.filter(Q(pk__in=[pk for pk, _s in named]) | Q(spiffe_id__in=same_ids))
    certs_list = list(certs)
    histories = _validity_histories(team_id=team_id, environment=environment, certs=certs_list)
    desired: list[_Desired] = []
    for cert in certs_list:
        facts = engine.CertificateFacts(
            fingerprint_sha256=cert.fingerprint_sha256,
            subject=cert.subject,
            spiffe_id=cert.spiffe_id or None,
            role=cert.role,
            not_after=cert.not_after,
            chain_status=cert.chain_status,
            chain_reason=cert.chain_reason,
            weaknesses=tuple(engine.Weakness(w["kind"], w["detail"]) for w in cert.weaknesses),
            not_before=cert.not_before,
            history=histories.get(_identity_key(cert.role, cert.spiffe_id, cert.subject,
                                                cert.service), ()),
        )
        for spec in engine.certificate_findings(facts, now=now, expiry_window=window,
                                                expiry=rules):
            desired.append(_Desired(spec, cert.pk, cert.spiffe_id))
    existing = _identity_findings(team_id=team_id, environment=environment).filter(
        category__in=_CERT_FINDING_KINDS
    )
    if certificate_ids is not None:
        existing = existing.filter(certificate_id__in=[c.pk for c in certs_list])
    counts = _reconcile(
        team_id=team_id, environment=environment, desired=desired, existing=existing,
        resolve_missing=True, now=now, actor=actor,
    )
    if certificate_ids is None:
        # The whole environment: its bundle's anchors too (a bundle replaced or the clock
        # moved on; a certificate upload leaves the anchors as they were).
        anchors = _reconcile(
            team_id=team_id, environment=environment,
            desired=_anchor_desired(team_id=team_id, environment=environment, now=now),
            existing=_identity_findings(team_id=team_id, environment=environment).filter(
                category__in=_ANCHOR_FINDING_KINDS
            ),
            resolve_missing=True, now=now, actor=actor,
        )
        counts = {key: counts[key] + anchors[key] for key in counts}
    identities = Identity.objects.filter(team_id=team_id, environment=environment)
    unmapped_existing = _identity_findings(team_id=team_id, environment=environment).filter(
        category=IdentityCategory.UNMAPPED
    )
    if spiffe_ids is not None:
        spiffe_ids = list(spiffe_ids)
        identities = identities.filter(spiffe_id__in=spiffe_ids)
        unmapped_existing = unmapped_existing.filter(spiffe_id__in=spiffe_ids)
    unmapped = [
        _Desired(engine.unmapped_identity_finding(spiffe_id=i.spiffe_id), None, i.spiffe_id)
        for i in identities
        if i.mapping_source == MappingSource.NONE
    ]
    more = _reconcile(
        team_id=team_id, environment=environment, desired=unmapped, existing=unmapped_existing,
        resolve_missing=True, now=now, actor=actor,
    )
    return {
        "opened": counts["opened"] + more["opened"],
        "resolved": counts["resolved"] + more["resolved"],
    }


def _identity_key(role: str, spiffe_id: str, subject: str, service: str) -> tuple[str, ...]:
    """Certificates of one identity: the same SPIFFE ID, else the same subject presented by
    the same service (leaf certificates; a CA is its own identity)."""
    if role != "leaf":
        return ("ca", subject)
    return ("spiffe", spiffe_id) if spiffe_id else ("subject", subject, service)


def _validity_histories(
    *, team_id: int, environment: str, certs: Sequence[Certificate],
) -> dict[tuple[str, ...], tuple[tuple[datetime, datetime], ...]]:
    """(not_before, not_after) of every leaf certificate of the identities of `certs` in the
    environment: the rotation history `engine.expiry` reads. One query."""
    spiffe_ids = {c.spiffe_id for c in certs if c.role == "leaf" and c.spiffe_id}
    subjects = {c.subject for c in certs if c.role == "leaf" and not c.spiffe_id}
    if not spiffe_ids and not subjects:
        return {}
    rows = Certificate.objects.filter(
        Q(spiffe_id__in=spiffe_ids) | Q(spiffe_id="", subject__in=subjects),
        team_id=team_id, environment=environment, role="leaf",
    ).values_list("role", "spiffe_id", "subject", "service", "not_before", "not_after")
    out: dict[tuple[str, ...], list[tuple[datetime, datetime]]] = {}
    for role, spiffe_id, subject, service, not_before, not_after in rows:
        out.setdefault(_identity_key(role, spiffe_id, subject, service), []).append(
            (not_before, not_after))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _anchor_desired(*, team_id: int, environment: str, now: datetime) -> list[_Desired]:
    anchors = TrustAnchor.objects.filter(
        bundle__team_id=team_id, bundle__environment=environment
    ).only("fingerprint_sha256", "subject", "not_after")
    window = expiry_window()
    desired = []
    for anchor in anchors:
        facts = engine.AnchorFacts(
            fingerprint_sha256=anchor.fingerprint_sha256,
            subject=anchor.subject,
            not_after=anchor.not_after,
        )
        for spec in engine.anchor_findings(
            facts, environment=environment, now=now, expiry_window=window
        ):
            desired.append(_Desired(spec, None, ""))
    return desired

