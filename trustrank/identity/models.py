"""Identity evidence: trust bundles, certificates, SPIFFE identities and caller policies. The
findings they produce live in trustrank.findings (kind "identity").

Everything is keyed by (team, environment name). Environments are plain strings here so this
app stays independent of the runtime app that also knows environments; services likewise are
referenced by name (and Kubernetes namespace), joined later by the graph engine.
"""

from __future__ import annotations

from django.db import models

from trustrank.identity.engine import ChainStatus


class TrustBundle(models.Model):
    """The CA certificates one environment trusts for workload identities (replaced on PUT)."""

    class Format(models.TextChoices):
        PEM = "pem", "PEM CA certificates"
        SPIFFE = "spiffe", "SPIFFE bundle (JWKS)"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    environment = models.CharField(max_length=64)
    format = models.CharField(max_length=8, choices=Format.choices)
    trust_domains = models.JSONField(default=list)
    refresh_hint = models.IntegerField(null=True, blank=True)
    sequence = models.BigIntegerField(null=True, blank=True)
    jwt_key_count = models.PositiveIntegerField(default=0)
    digest = models.CharField(max_length=64)
    job_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment"]
        constraints = [
            models.UniqueConstraint(fields=["team", "environment"], name="trustbundle_team_env")
        ]

    def __str__(self) -> str:
        return f"trust bundle for {self.environment}"


class TrustAnchor(models.Model):
    bundle = models.ForeignKey(TrustBundle, on_delete=models.CASCADE, related_name="anchors")
    fingerprint_sha256 = models.CharField(max_length=64)
    subject = models.TextField()
    not_before = models.DateTimeField()
    not_after = models.DateTimeField()
    trust_domain = models.CharField(max_length=255, blank=True)
    der = models.BinaryField()

    class Meta:
        ordering = ["subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["bundle", "fingerprint_sha256"], name="trustanchor_bundle_fp"
            )
        ]

    def __str__(self) -> str:
        return self.subject


class Role(models.TextChoices):
    LEAF = "leaf", "Leaf"
    CA = "ca", "CA"


class Certificate(models.Model):
    """One X.509 certificate seen in an environment, with every parsed field and the result
    of verifying it against the environment's trust bundle at `verified_at`."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    environment = models.CharField(max_length=64)
    fingerprint_sha256 = models.CharField(max_length=64)
    der = models.BinaryField()
    role = models.CharField(max_length=8, choices=Role.choices)
    subject = models.TextField(blank=True)
    issuer = models.TextField(blank=True)
    serial = models.CharField(max_length=80)
    version = models.PositiveSmallIntegerField(default=3)
    not_before = models.DateTimeField()
    not_after = models.DateTimeField(db_index=True)
    key_type = models.CharField(max_length=16)
    key_size = models.PositiveIntegerField(null=True, blank=True)
    key_curve = models.CharField(max_length=40, blank=True)
    signature_algorithm = models.CharField(max_length=80)
    signature_hash = models.CharField(max_length=20, blank=True)
    is_ca = models.BooleanField(null=True)
    path_length = models.PositiveIntegerField(null=True, blank=True)
    key_usage = models.JSONField(default=list)
    extended_key_usage = models.JSONField(default=list)
    san_dns = models.JSONField(default=list)
    san_ip = models.JSONField(default=list)
    san_uri = models.JSONField(default=list)
    spiffe_id = models.CharField(max_length=2048, blank=True)
    trust_domain = models.CharField(max_length=255, blank=True)
    spiffe_errors = models.JSONField(default=list)
    subject_key_id = models.CharField(max_length=200, blank=True)
    authority_key_id = models.CharField(max_length=200, blank=True)
    self_issued = models.BooleanField(default=False)
    chain_status = models.CharField(max_length=16, choices=ChainStatus.CHOICES)
    chain_reason = models.TextField(blank=True)
    chain_path = models.JSONField(default=list)
    verified_at = models.DateTimeField()
    strength = models.PositiveSmallIntegerField(default=0)
    strength_explanation = models.TextField(blank=True)
    weaknesses = models.JSONField(default=list)
    # Upload metadata: who presents it and where it was seen.
    service = models.CharField(max_length=200, blank=True)
    namespace = models.CharField(max_length=200, blank=True)
    observed = models.CharField(max_length=500, blank=True)
    job_id = models.UUIDField(null=True, blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["not_after", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "environment", "fingerprint_sha256"], name="certificate_team_env_fp"
            )
        ]
        indexes = [
            models.Index(fields=["team", "environment", "spiffe_id"], name="cert_team_env_spiffe"),
        ]

    def __str__(self) -> str:
        return self.spiffe_id or self.subject or self.fingerprint_sha256


class MappingSource(models.TextChoices):
    MANUAL = "manual", "Set by hand"
    METADATA = "metadata", "Upload metadata"
    RULE = "rule", "Mapping rule"
    NONE = "none", "Not mapped"


class Identity(models.Model):
    """A SPIFFE ID seen in an environment, the service it maps to, and the strength of its
    best currently valid certificate (0 when none is valid)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    environment = models.CharField(max_length=64)
    spiffe_id = models.CharField(max_length=2048)
    trust_domain = models.CharField(max_length=255)
    trust_domain_known = models.BooleanField(default=False)
    service_name = models.CharField(max_length=200, blank=True)
    service_namespace = models.CharField(max_length=200, blank=True)
    mapping_source = models.CharField(
        max_length=12, choices=MappingSource.choices, default=MappingSource.NONE
    )
    strength = models.PositiveSmallIntegerField(default=0)
    # Why it has that strength, in words (engine.identity_strength_reason).
    strength_reason = models.TextField(blank=True)
    best_certificate = models.ForeignKey(
        Certificate, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    certificate_count = models.PositiveIntegerField(default=0)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment", "spiffe_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "environment", "spiffe_id"], name="identity_team_env_spiffe"
            )
        ]

    def __str__(self) -> str:
        return self.spiffe_id


class ServicePolicy(models.Model):
    """Which caller identities may call a service, and whether mTLS is required."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    environment = models.CharField(max_length=64)
    service_name = models.CharField(max_length=200)
    namespace = models.CharField(max_length=200, blank=True)
    allowed_callers = models.JSONField(default=list)
    require_mtls = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment", "service_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "environment", "service_name", "namespace"],
                name="servicepolicy_unique",
            )
        ]

    def __str__(self) -> str:
        return f"policy for {self.service_name}"


class IdentityCategory(models.TextChoices):
    """What an identity finding (`Finding.category`) is about."""

    EXPIRED = "expired", "Expired certificate"
    EXPIRING = "expiring", "Certificate expiring soon"
    WEAK_KEY = "weak_key", "Weak key"
    WEAK_SIGNATURE = "weak_signature", "Weak signature"
    CHAIN_INVALID = "chain_invalid", "Chain does not verify"
    UNMAPPED = "unmapped", "Identity not mapped to a service"
    POLICY_VIOLATION = "policy_violation", "Caller policy violation"
    ANCHOR_EXPIRED = "anchor_expired", "Trust anchor expired"
    ANCHOR_EXPIRING = "anchor_expiring", "Trust anchor expiring soon"
