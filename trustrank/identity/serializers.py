"""Explicit API shapes for identity evidence."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trustrank.findings.models import Finding
from trustrank.identity import engine
from trustrank.identity.models import (
    Certificate,
    Identity,
    IdentityCategory,
    ServicePolicy,
    TrustAnchor,
    TrustBundle,
)
from trustrank.identity.services.environments import strength_rules


class CertificateSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    spiffe_id = serializers.SerializerMethodField()
    chain = serializers.SerializerMethodField()

    class Meta:
        model = Certificate
        fields = [
            "id", "team", "environment", "fingerprint_sha256", "role", "spiffe_id",
            "trust_domain", "strength", "strength_explanation", "not_before", "not_after",
            "chain_status", "chain_reason", "chain", "subject", "issuer", "serial", "version",
            "key_type", "key_size", "key_curve", "signature_algorithm", "signature_hash",
            "is_ca", "path_length", "key_usage", "extended_key_usage", "san_dns", "san_ip",
            "san_uri", "spiffe_errors", "subject_key_id", "authority_key_id", "self_issued",
            "weaknesses", "service", "namespace", "observed", "first_seen_at", "last_seen_at",
        ]

    # Null when the certificate carries no (valid) SPIFFE ID.
    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_spiffe_id(self, obj: Certificate) -> str | None:
        return obj.spiffe_id or None

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_chain(self, obj: Certificate) -> dict[str, object]:
        return {
            "status": obj.chain_status,
            "reason": obj.chain_reason,
            "verified_at": obj.verified_at.isoformat(),
            "path": obj.chain_path,
        }


class IdentitySerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    service = serializers.SerializerMethodField()
    best_certificate = serializers.SerializerMethodField()

    class Meta:
        model = Identity
        fields = [
            "id", "team", "environment", "spiffe_id", "trust_domain", "trust_domain_known",
            "service", "strength", "strength_reason", "expires_at", "best_certificate",
            "certificate_count",
            "first_seen_at", "updated_at",
        ]

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_service(self, obj: Identity) -> dict[str, str] | None:
        if not obj.service_name:
            return None
        return {
            "name": obj.service_name,
            "namespace": obj.service_namespace,
            "source": obj.mapping_source,
        }

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_best_certificate(self, obj: Identity) -> dict[str, object] | None:
        cert = obj.best_certificate
        if cert is None:
            return None
        return {
            "id": cert.pk,
            "fingerprint_sha256": cert.fingerprint_sha256,
            "not_after": cert.not_after.isoformat(),
        }


class IdentityFindingSerializer(serializers.ModelSerializer):
    """The identity findings API as it was before the one findings table: `kind` is the
    identity category, `status` open or resolved. The full lifecycle is on /findings."""

    team = serializers.CharField(source="team.name")
    kind = serializers.ChoiceField(source="category", choices=IdentityCategory.choices)
    status = serializers.ChoiceField(
        source="open_status", choices=[("open", "Open"), ("resolved", "Resolved")]
    )
    first_seen_at = serializers.DateTimeField(source="first_seen", read_only=True)
    last_seen_at = serializers.DateTimeField(source="last_seen")

    class Meta:
        model = Finding
        fields = [
            "id", "team", "environment", "kind", "severity", "status", "state", "title",
            "evidence", "certificate", "spiffe_id", "first_seen_at", "last_seen_at",
            "resolved_at",
        ]
        # As documented before the move: always present (blank only for other kinds).
        extra_kwargs = {
            "environment": {"required": True, "allow_blank": False},
            "title": {"required": True, "allow_blank": False},
            "severity": {"required": True},
        }



class TrustAnchorSerializer(serializers.ModelSerializer):
    expired = serializers.SerializerMethodField()

    class Meta:
        model = TrustAnchor
        fields = [
            "fingerprint_sha256", "subject", "not_before", "not_after", "expired",
            "trust_domain",
        ]

    def get_expired(self, obj: TrustAnchor) -> bool:
        return obj.not_after <= timezone.now()


class TrustBundleSerializer(serializers.ModelSerializer):
    anchors = TrustAnchorSerializer(many=True, read_only=True)
    warnings = serializers.SerializerMethodField()

    class Meta:
        model = TrustBundle
        fields = [
            "environment", "format", "trust_domains", "refresh_hint", "sequence",
            "jwt_key_count", "digest", "anchors", "warnings", "created_at", "updated_at",
        ]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_warnings(self, obj: TrustBundle) -> list[str]:
        return engine.trust_bundle_warnings(trust_domains=obj.trust_domains, rules=strength_rules())


class ServicePolicySerializer(serializers.ModelSerializer):
    class Meta:
        model = ServicePolicy
        fields = [
            "id", "environment", "service_name", "namespace", "allowed_callers",
            "require_mtls", "updated_at",
        ]
