"""Workload identities: refresh from certificates, and the SPIFFE ID to service mapping."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.identity import engine
from trustrank.identity.engine import ChainStatus
from trustrank.identity.models import Certificate, Identity, MappingSource, Role, TrustBundle
from trustrank.identity.services.environments import (
    _service_catalog,
    environment_lock,
    mapping_rules,
)
from trustrank.identity.services.findings import findings_sync


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
        identity.strength_reason = engine.identity_strength_reason(
            strength=identity.strength,
            best=_strength_facts(best) if best else None,
            certificates=[_strength_facts(c) for c in group],
            trust_domain=identity.trust_domain,
            trust_domain_known=identity.trust_domain_known,
            bundle_exists=bundle is not None,
            bundle_domains=sorted(domains),
            now=now,
        )
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


def _strength_facts(cert: Certificate) -> engine.IdentityCertificate:
    return engine.IdentityCertificate(
        chain_status=cert.chain_status,
        chain_reason=cert.chain_reason,
        strength=cert.strength,
        strength_explanation=cert.strength_explanation,
        not_after=cert.not_after,
    )


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

