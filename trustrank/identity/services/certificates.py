"""Certificates and trust bundles: store, verify, import an upload, replace a bundle, and the
periodic re-evaluation of every environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cryptography import x509
from django.db import transaction
from django.utils import timezone

from trustrank.findings.services.audit import Actor
from trustrank.identity import engine
from trustrank.identity.engine import ChainStatus
from trustrank.identity.models import Certificate, Role, TrustAnchor, TrustBundle
from trustrank.identity.services.environments import environment_lock, strength_rules
from trustrank.identity.services.findings import findings_sync
from trustrank.identity.services.identities import identities_refresh
from trustrank.parsers.trust_bundle import ParsedBundle
from trustrank.parsers.x509 import ParsedCertificate, certificate_from_crypto


def certificates_import(
    *,
    team_id: int,
    environment: str,
    certificates: Sequence[ParsedCertificate],
    service: str,
    namespace: str,
    observed: str,
    job_id: Any,
    progress: Callable[..., None],
) -> dict[str, Any]:
    """Load one certificate upload: store, verify, refresh identities and findings. Runs in
    one transaction with the job's completion; the upsert on (team, environment,
    fingerprint) makes a re-run a no-op. Returns the job's counts."""
    parsed = certificates
    environment_lock(team_id=team_id, environment=environment)
    now = timezone.now()
    progress(phase="storing", total=len(parsed))
    stored = certificates_store(
        team_id=team_id,
        environment=environment,
        certificates=parsed,
        service=service,
        namespace=namespace,
        observed=observed,
        job_id=job_id,
        now=now,
    )
    progress(phase="verifying")
    new_ca = any(c.is_ca for c in parsed)
    # A new CA may complete the chain of leaves already stored: verify the whole environment.
    scope = None if new_ca else [c.pk for c in stored]
    verified = certificates_verify(
        team_id=team_id, environment=environment, now=now, certificate_ids=scope
    )
    spiffe_ids = None if new_ca else {c.spiffe_id for c in stored if c.spiffe_id}
    identities_refresh(team_id=team_id, environment=environment, now=now, spiffe_ids=spiffe_ids)
    findings = findings_sync(
        team_id=team_id,
        environment=environment,
        now=now,
        certificate_ids=scope,
        spiffe_ids=spiffe_ids,
        actor=Actor.system(f"job {job_id}"),
    )
    by_status: dict[str, int] = {}
    stored_ids = {c.pk for c in stored}
    for cert in verified:
        if cert.pk in stored_ids:
            by_status[cert.chain_status] = by_status.get(cert.chain_status, 0) + 1
    return {
        "certificates": len(stored),
        "leaves": sum(1 for c in stored if c.role == Role.LEAF),
        "findings_opened": findings["opened"],
        "_result": {
            "environment": environment,
            "chain_status": by_status,
            "certificates": [
                {
                    "id": c.pk,
                    "fingerprint_sha256": c.fingerprint_sha256,
                    "spiffe_id": c.spiffe_id or None,
                }
                for c in stored
            ],
        },
    }


def trust_bundle_replace(
    *,
    team_id: int,
    environment: str,
    parsed: ParsedBundle,
    digest: str,
    job_id: Any,
    progress: Callable[..., None],
) -> dict[str, Any]:
    """Replace an environment's trust bundle, then re-verify every certificate in it.
    Returns the job's counts."""
    environment_lock(team_id=team_id, environment=environment)
    now = timezone.now()
    bundle, _ = TrustBundle.objects.update_or_create(
        team_id=team_id,
        environment=environment,
        defaults={
            "format": parsed.format,
            "trust_domains": list(parsed.trust_domains),
            "refresh_hint": parsed.refresh_hint,
            "sequence": parsed.sequence,
            "jwt_key_count": parsed.jwt_key_count,
            "digest": digest,
            "job_id": job_id,
        },
    )
    bundle.anchors.all().delete()
    TrustAnchor.objects.bulk_create(
        [
            TrustAnchor(
                bundle=bundle,
                fingerprint_sha256=a.fingerprint_sha256,
                subject=a.subject,
                not_before=a.not_before,
                not_after=a.not_after,
                trust_domain=a.trust_domain or "",
                der=a.der,
            )
            for a in parsed.anchors
        ]
    )
    progress(phase="verifying")
    verified = certificates_verify(team_id=team_id, environment=environment, now=now)
    identities_refresh(team_id=team_id, environment=environment, now=now)
    findings = findings_sync(
        team_id=team_id, environment=environment, now=now, actor=Actor.system(f"job {job_id}")
    )
    return {
        "anchors": len(parsed.anchors),
        "certificates_reverified": len(verified),
        "findings_opened": findings["opened"],
        "_result": {
            "environment": environment,
            "format": parsed.format,
            "trust_domains": list(parsed.trust_domains),
        },
    }


def certificates_store(
    *,
    team_id: int,
    environment: str,
    certificates: Sequence[ParsedCertificate],
    service: str,
    namespace: str,
    observed: str,
    job_id: Any,
    now: datetime,
) -> list[Certificate]:
    """Upsert parsed certificates. Verification fields get a placeholder that
    `certificates_verify` replaces in the same transaction."""
    rows = []
    for cert in certificates:
        rows.append(
            Certificate(
                team_id=team_id,
                environment=environment,
                fingerprint_sha256=cert.fingerprint_sha256,
                der=cert.der,
                role=Role.CA if cert.is_ca else Role.LEAF,
                subject=cert.subject,
                issuer=cert.issuer,
                serial=cert.serial[:80],
                version=cert.version,
                not_before=cert.not_before,
                not_after=cert.not_after,
                key_type=cert.key_type,
                key_size=cert.key_size,
                key_curve=cert.key_curve,
                signature_algorithm=cert.signature_algorithm,
                signature_hash=cert.signature_hash or "",
                is_ca=cert.is_ca,
                path_length=cert.path_length,
                key_usage=list(cert.key_usage),
                extended_key_usage=list(cert.extended_key_usage),
                san_dns=list(cert.san_dns),
                san_ip=list(cert.san_ip),
                san_uri=list(cert.san_uri),
                spiffe_id=cert.spiffe_id or "",
                trust_domain=cert.trust_domain or "",
                spiffe_errors=list(cert.spiffe_errors),
                subject_key_id=cert.subject_key_id,
                authority_key_id=cert.authority_key_id,
                self_issued=cert.self_issued,
                chain_status=ChainStatus.UNTRUSTED,
                chain_reason="not verified yet",
                verified_at=now,
                service=service,
                namespace=namespace,
                observed=observed,
                job_id=job_id,
                last_seen_at=now,
            )
        )
    update_fields = ["last_seen_at", "job_id"]
    # Metadata given with a re-upload replaces the old; an upload without it keeps the old.
    if service:
        update_fields += ["service", "namespace"]
    if observed:
        update_fields.append("observed")
    Certificate.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["team", "environment", "fingerprint_sha256"],
        update_fields=update_fields,
    )
    prints = [c.fingerprint_sha256 for c in certificates]
    return list(
        Certificate.objects.filter(
            team_id=team_id, environment=environment, fingerprint_sha256__in=prints
        )
    )


def _parsed(der: bytes) -> ParsedCertificate:
    return certificate_from_crypto(x509.load_der_x509_certificate(der))


def certificates_verify(
    *,
    team_id: int,
    environment: str,
    now: datetime,
    certificate_ids: Sequence[int] | None = None,
) -> list[Certificate]:
    """Verify certificates (all of the environment, or some) against its bundle at `now`,
    using the environment's stored CA certificates as untrusted intermediates."""
    bundle = (
        TrustBundle.objects.filter(team_id=team_id, environment=environment)
        .prefetch_related("anchors")
        .first()
    )
    anchors: list[ParsedCertificate] = []
    domains: set[str] = set()
    if bundle is not None:
        anchors = [_parsed(bytes(a.der)) for a in bundle.anchors.all()]
        domains = set(bundle.trust_domains)
    env_certs = Certificate.objects.filter(team_id=team_id, environment=environment)
    intermediates = [_parsed(bytes(c.der)) for c in env_certs.filter(role=Role.CA)]
    targets = env_certs if certificate_ids is None else env_certs.filter(pk__in=certificate_ids)
    rules = strength_rules()
    changed: list[Certificate] = []
    for row in targets:
        parsed = _parsed(bytes(row.der))
        others = [c for c in intermediates if c.fingerprint_sha256 != parsed.fingerprint_sha256]
        result = engine.chain_verify(leaf=parsed, intermediates=others, anchors=anchors, at=now)
        weaknesses = engine.certificate_weaknesses(parsed, rules)
        strength = engine.certificate_strength(
            status=result.status,
            spiffe_id=parsed.spiffe_id,
            trust_domain_known=bool(parsed.trust_domain) and parsed.trust_domain in domains,
            weaknesses=weaknesses,
            rules=rules,
        )
        row.chain_status = result.status
        row.chain_reason = result.reason
        row.chain_path = [
            {"subject": p.subject, "fingerprint_sha256": p.fingerprint_sha256, "role": p.role}
            for p in result.path
        ]
        row.verified_at = now
        row.strength = strength.value
        row.strength_explanation = strength.explanation
        row.weaknesses = [{"kind": w.kind, "detail": w.detail} for w in weaknesses]
        changed.append(row)
    Certificate.objects.bulk_update(
        changed,
        [
            "chain_status", "chain_reason", "chain_path", "verified_at", "strength",
            "strength_explanation", "weaknesses",
        ],
        batch_size=500,
    )
    return changed


def identity_environments_reevaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Time passes: certificates expire, enter the warning window. Re-verify every
    environment and sync its findings (periodic task)."""
    now = now or timezone.now()
    pairs = set(Certificate.objects.values_list("team_id", "environment").distinct())
    # An environment with a bundle and no certificates yet still has anchors that expire.
    pairs |= set(TrustBundle.objects.values_list("team_id", "environment"))
    opened = 0
    for team_id, environment in sorted(pairs):
        with transaction.atomic():
            environment_lock(team_id=team_id, environment=environment)
            certificates_verify(team_id=team_id, environment=environment, now=now)
            identities_refresh(team_id=team_id, environment=environment, now=now)
            opened += findings_sync(team_id=team_id, environment=environment, now=now)["opened"]
    return {"environments": len(pairs), "findings_opened": opened}

