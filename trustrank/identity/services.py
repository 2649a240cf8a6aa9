"""Writes for identity evidence: loading parsed certificates and trust bundles (called by
ingest/loaders), verifying certificates, refreshing identities, syncing findings, mappings
and caller policies."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding, FindingKind, FindingSource
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.findings.services.reconcile import FindingSpec as UnifiedSpec
from trustrank.findings.services.reconcile import finding_fingerprint, findings_reconcile
from trustrank.identity import engine
from trustrank.identity.engine import ChainStatus, FindingSpec
from trustrank.identity.models import (
    Certificate,
    Identity,
    IdentityCategory,
    MappingSource,
    Role,
    ServicePolicy,
    TrustAnchor,
    TrustBundle,
)
from trustrank.lib.locks import advisory_xact_lock
from trustrank.parsers.x509 import ParsedBundle, ParsedCertificate, certificate_from_crypto

ENVIRONMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CERT_FINDING_KINDS = (
    IdentityCategory.EXPIRED,
    IdentityCategory.EXPIRING,
    IdentityCategory.WEAK_KEY,
    IdentityCategory.WEAK_SIGNATURE,
    IdentityCategory.CHAIN_INVALID,
)


# --- Settings -------------------------------------------------------------------------------


def strength_rules() -> engine.StrengthRules:
    return engine.StrengthRules.from_mapping(settings.TRUSTRANK_IDENTITY_STRENGTH)


def mapping_rules() -> engine.MappingRules:
    return engine.MappingRules.compile(
        settings.TRUSTRANK_IDENTITY_MAPPING_RULES, settings.TRUSTRANK_IDENTITY_MAPPING_EXCLUDE
    )


def expiry_window() -> timedelta:
    return timedelta(days=settings.TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS)


def _service_catalog(team_id: int, environment: str) -> set[tuple[str, str]] | None:
    """Known services (name, namespace) when a catalog is configured, else None (a rule's
    answer is then taken as is). The runtime app can provide one without this app importing
    it: TRUSTRANK_IDENTITY_SERVICE_CATALOG = "dotted.path(team_id, environment)"."""
    path = settings.TRUSTRANK_IDENTITY_SERVICE_CATALOG
    if not path:
        return None
    func: Callable[..., Iterable[tuple[str, str]]] = import_string(path)
    return {(name, namespace or "") for name, namespace in func(team_id, environment)}


def environment_lock(*, team_id: int, environment: str) -> None:
    """Serialise writers of one (team, environment) until the transaction ends.

    Two workers loading certificates for the same environment would otherwise race to
    create the same identity or finding rows; the lock is cheaper than retrying.
    """
    advisory_xact_lock(f"trustrank.identity:{team_id}:{environment}")


class InvalidEnvironment(ValueError):
    """An environment name TrustRank does not accept."""


def environment_validate(name: str) -> str:
    name = (name or "").strip() or "default"
    if not ENVIRONMENT_RE.match(name):
        raise InvalidEnvironment(
            f"environment {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def team_for_triage(*, principal: Principal, team_hint: str = "") -> Team:
    """The team a person sets a caller policy for (the 'triage' scope)."""
    teams = Team.objects.filter(pk__in=principal.teams_with(Scope.TRIAGE))
    if team_hint:
        team = teams.filter(name=team_hint).first()
        if team is None:
            raise PermissionError(f"you may not set policies for team {team_hint!r}")
        return team
    found = list(teams[:2])
    if not found:
        raise PermissionError("setting a caller policy needs the 'triage' scope")
    if len(found) > 1:
        raise ValueError("you belong to several teams: name one in the team field")
    return found[0]


# --- Loading uploads (called by ingest/loaders) --------------------------------------------


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


# --- Storing and verifying ------------------------------------------------------------------


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


# --- Identities -----------------------------------------------------------------------------


def identities_refresh(
    *, team_id: int, environment: str, now: datetime, spiffe_ids: Iterable[str] | None = None
) -> list[Identity]:
    """Create identities for SPIFFE IDs seen in leaf certificates; recompute strength, best
    certificate, expiry and the rule/metadata mapping (a manual mapping is never overwritten).

    Only certificates whose chain is valid now count for strength, so a forged certificate
    claiming someone's SPIFFE ID neither lends nor takes strength.
    """
    certs = Certificate.objects.filter(
        team_id=team_id, environment=environment, role=Role.LEAF
    ).exclude(spiffe_id="")
    if spiffe_ids is not None:
        spiffe_ids = set(spiffe_ids)
        if not spiffe_ids:
            return []
        certs = certs.filter(spiffe_id__in=spiffe_ids)
    bundle = TrustBundle.objects.filter(team_id=team_id, environment=environment).first()
    domains = set(bundle.trust_domains) if bundle else set()
    grouped: dict[str, list[Certificate]] = {}
    for cert in certs.order_by("pk"):
        grouped.setdefault(cert.spiffe_id, []).append(cert)
    rules = mapping_rules()
    catalog = _service_catalog(team_id, environment)
    existing = {
        i.spiffe_id: i
        for i in Identity.objects.filter(
            team_id=team_id, environment=environment, spiffe_id__in=list(grouped)
        )
    }
    result: list[Identity] = []
    for spiffe_id, group in grouped.items():
        valid = [c for c in group if c.chain_status == ChainStatus.VALID and c.not_after > now]
        best = max(valid, key=lambda c: (c.strength, c.not_after), default=None)
        identity = existing.get(spiffe_id) or Identity(
            team_id=team_id, environment=environment, spiffe_id=spiffe_id
        )
        identity.trust_domain = group[0].trust_domain
        identity.trust_domain_known = identity.trust_domain in domains
        identity.strength = best.strength if best else 0
        identity.best_certificate = best
        identity.expires_at = best.not_after if best else max(c.not_after for c in group)
        identity.certificate_count = len(group)
        if identity.mapping_source != MappingSource.MANUAL:
            name, namespace, source = _mapping_for(
                spiffe_id=spiffe_id, certs=group, rules=rules, catalog=catalog
            )
            identity.service_name, identity.service_namespace = name, namespace
            identity.mapping_source = source
        identity.save()
        result.append(identity)
    return result


def _mapping_for(
    *,
    spiffe_id: str,
    certs: Sequence[Certificate],
    rules: engine.MappingRules,
    catalog: set[tuple[str, str]] | None,
) -> tuple[str, str, str]:
    with_service = [c for c in certs if c.service]
    if with_service:
        latest = max(with_service, key=lambda c: c.last_seen_at)
        return latest.service, latest.namespace, MappingSource.METADATA
    ref = engine.identity_map(spiffe_id, rules)
    if ref is None:
        return "", "", MappingSource.NONE
    if catalog is not None:
        known = (ref.name, ref.namespace) in catalog or (
            not ref.namespace and any(name == ref.name for name, _ in catalog)
        )
        if not known:
            return "", "", MappingSource.NONE
    return ref.name, ref.namespace, MappingSource.RULE


@transaction.atomic
def identity_map_set(
    *, identity: Identity, service_name: str, namespace: str, principal: Principal
) -> Identity:
    """Map by hand (or clear the manual mapping with an empty service name)."""
    if not principal.can(Scope.TRIAGE, identity.team_id):
        raise PermissionError("mapping an identity needs the 'triage' scope")
    environment_lock(team_id=identity.team_id, environment=identity.environment)
    before = {
        "service_name": identity.service_name,
        "service_namespace": identity.service_namespace,
        "mapping_source": identity.mapping_source,
    }
    service_name, namespace = service_name.strip()[:200], namespace.strip()[:200]
    if service_name:
        identity.service_name, identity.service_namespace = service_name, namespace
        identity.mapping_source = MappingSource.MANUAL
        identity.save()
    else:
        identity.mapping_source = MappingSource.NONE
        identity.save()
        identities_refresh(
            team_id=identity.team_id,
            environment=identity.environment,
            now=timezone.now(),
            spiffe_ids=[identity.spiffe_id],
        )
        identity.refresh_from_db()
    actor = Actor.of(principal)
    audit_event_record(
        actor=actor,
        action="mapping_set",
        team_id=identity.team_id,
        subject_type="identity.mapping",
        subject_id=identity.spiffe_id,
        environment=identity.environment,
        before=before,
        after={
            "service_name": identity.service_name,
            "service_namespace": identity.service_namespace,
            "mapping_source": identity.mapping_source,
        },
    )
    findings_sync(
        team_id=identity.team_id,
        environment=identity.environment,
        now=timezone.now(),
        certificate_ids=[],
        spiffe_ids={identity.spiffe_id},
        actor=actor,
    )
    return identity


# --- Findings -------------------------------------------------------------------------------


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
    certs = Certificate.objects.filter(team_id=team_id, environment=environment)
    if certificate_ids is not None:
        certs = certs.filter(pk__in=certificate_ids)
    desired: list[_Desired] = []
    for cert in certs:
        facts = engine.CertificateFacts(
            fingerprint_sha256=cert.fingerprint_sha256,
            subject=cert.subject,
            spiffe_id=cert.spiffe_id or None,
            role=cert.role,
            not_after=cert.not_after,
            chain_status=cert.chain_status,
            chain_reason=cert.chain_reason,
            weaknesses=tuple(engine.Weakness(w["kind"], w["detail"]) for w in cert.weaknesses),
        )
        for spec in engine.certificate_findings(facts, now=now, expiry_window=window):
            desired.append(_Desired(spec, cert.pk, cert.spiffe_id))
    existing = _identity_findings(team_id=team_id, environment=environment).filter(
        category__in=_CERT_FINDING_KINDS
    )
    if certificate_ids is not None:
        existing = existing.filter(certificate_id__in=list(certs.values_list("pk", flat=True)))
    counts = _reconcile(
        team_id=team_id, environment=environment, desired=desired, existing=existing,
        resolve_missing=True, now=now, actor=actor,
    )
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


def identity_environments_reevaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Time passes: certificates expire, enter the warning window. Re-verify every
    environment and sync its findings (periodic task)."""
    now = now or timezone.now()
    pairs = set(Certificate.objects.values_list("team_id", "environment").distinct())
    opened = 0
    for team_id, environment in sorted(pairs):
        with transaction.atomic():
            environment_lock(team_id=team_id, environment=environment)
            certificates_verify(team_id=team_id, environment=environment, now=now)
            identities_refresh(team_id=team_id, environment=environment, now=now)
            opened += findings_sync(team_id=team_id, environment=environment, now=now)["opened"]
    return {"environments": len(pairs), "findings_opened": opened}


# --- Caller policies ------------------------------------------------------------------------


@transaction.atomic
def service_policy_set(
    *,
    team: Team,
    environment: str,
    service_name: str,
    namespace: str = "",
    allowed_callers: Sequence[str],
    require_mtls: bool,
    principal: Principal,
) -> ServicePolicy:
    if not principal.can(Scope.TRIAGE, team.pk):
        raise PermissionError("setting a caller policy needs the 'triage' scope")
    environment = environment_validate(environment)
    service_name = service_name.strip()
    if not service_name:
        raise ValueError("a policy needs a service name")
    patterns = [p.strip() for p in allowed_callers if p.strip()]
    for pattern in patterns:
        if not pattern.startswith("spiffe://"):
            raise ValueError(f"allowed caller {pattern!r} must be a SPIFFE ID or pattern (spiffe://…)")
    policy, created = ServicePolicy.objects.update_or_create(
        team=team,
        environment=environment,
        service_name=service_name[:200],
        namespace=namespace.strip()[:200],
        defaults={"allowed_callers": patterns, "require_mtls": require_mtls},
    )
    audit_event_record(
        actor=Actor.of(principal),
        action="policy_created" if created else "policy_updated",
        team_id=team.pk,
        subject_type="identity.policy",
        subject_id=f"{policy.service_name}/{policy.namespace}",
        environment=environment,
        after={
            "service_name": policy.service_name,
            "namespace": policy.namespace,
            "allowed_callers": patterns,
            "require_mtls": require_mtls,
        },
    )
    # Check the calls already observed against the new policy without waiting for beat.
    from trustrank.identity.tasks import identity_policies_check

    transaction.on_commit(identity_policies_check.delay)
    return policy


@transaction.atomic
def identity_policy_evaluate(
    *,
    team_id: int,
    environment: str,
    edges: list[engine.ObservedEdge],
    actor: Actor | None = None,
) -> list[Finding]:
    """Check observed call edges (plain data) against the callees' caller policies and
    record a finding for each violating edge. Violations are evidence of something that
    happened, so a later call list without the edge does not resolve them."""
    environment_lock(team_id=team_id, environment=environment)
    policies = {
        (p.service_name, p.namespace): engine.CallerPolicy(
            service=p.service_name,
            namespace=p.namespace,
            allowed_callers=tuple(p.allowed_callers),
            require_mtls=p.require_mtls,
        )
        for p in ServicePolicy.objects.filter(team_id=team_id, environment=environment)
    }
    desired: list[_Desired] = []
    for edge in edges:
        policy = policies.get((edge.callee_service, edge.callee_namespace)) or policies.get(
            (edge.callee_service, "")
        )
        if policy is None:
            continue
        reasons = engine.edge_policy_violations(edge, policy)
        if reasons:
            desired.append(
                _Desired(engine.policy_finding(edge, reasons), None, edge.caller_spiffe_id or "")
            )
    fingerprints = [
        identity_finding_fingerprint(
            environment=environment, category=d.spec.kind, key=d.spec.key
        )
        for d in desired
    ]
    existing = _identity_findings(team_id=team_id, environment=environment).filter(
        fingerprint__in=fingerprints
    )
    _reconcile(
        team_id=team_id, environment=environment, desired=desired, existing=existing,
        resolve_missing=False, now=timezone.now(),
        actor=actor or Actor.system("caller policy check"),
    )
    return list(
        Finding.objects.filter(team_id=team_id, fingerprint__in=fingerprints).order_by("pk")
    )


def identity_policies_check(*, window: timedelta | None = None) -> dict[str, int]:
    """Check the calls the runtime graph observed against every caller policy.

    For each environment that has a policy, the service-to-service calls of the last window
    become ObservedEdges: the caller's SPIFFE ID is that of the identity mapped to the caller
    service (its strongest valid one), and a call counts as mTLS only when every observed
    call in the window carried mTLS evidence.
    """
    from trustrank.runtime.selectors import observed_calls

    window = window or timedelta(seconds=settings.TRUSTRANK_IDENTITY_POLICY_WINDOW_SECONDS)
    since = timezone.now() - window
    checked = violations = 0
    scopes = ServicePolicy.objects.values_list("team_id", "environment").distinct()
    for team_id, environment in scopes:
        calls = observed_calls(team_id=team_id, environment=environment, since=since)
        if not calls:
            continue
        spiffe_by_service: dict[tuple[str, str], str] = {}
        identities = Identity.objects.filter(
            team_id=team_id,
            environment=environment,
            best_certificate__isnull=False,
            strength__gt=0,
        ).exclude(service_name="")
        for identity in identities.order_by("strength"):  # strongest last, so it wins
            key = (identity.service_name, identity.service_namespace)
            spiffe_by_service[key] = identity.spiffe_id
            spiffe_by_service.setdefault((identity.service_name, ""), identity.spiffe_id)
        edges = [
            engine.ObservedEdge(
                caller_service=call.caller,
                callee_service=call.callee,
                caller_spiffe_id=spiffe_by_service.get((call.caller, call.caller_namespace))
                or spiffe_by_service.get((call.caller, "")),
                mtls=call.calls > 0 and call.mtls_calls >= call.calls,
                caller_namespace=call.caller_namespace,
                callee_namespace=call.callee_namespace,
            )
            for call in calls
        ]
        found = identity_policy_evaluate(team_id=team_id, environment=environment, edges=edges)
        checked += len(edges)
        violations += len(found)
    return {"edges": checked, "violations": violations}
