"""Vulnerability intelligence: global feeds (OSV advisories, CISA KEV, FIRST EPSS) and per-team
findings with their triage state and an append-only audit trail."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

# --- feeds: global reference data, not owned by any team ------------------------------------


class Advisory(models.Model):
    """One OSV record, upserted by id: a newer `modified` replaces it, an older one is ignored."""

    id = models.CharField(max_length=128, primary_key=True)
    aliases = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    # The lowest CVE among id and aliases: the key KEV and EPSS join on.
    cve_id = models.CharField(max_length=32, blank=True, db_index=True)
    summary = models.TextField(blank=True)
    details = models.TextField(blank=True)
    # [{type, vector, base_score}] with base scores computed by the `cvss` library.
    severity = models.JSONField(default=list, blank=True)
    cvss_score = models.FloatField(null=True, blank=True)
    severity_label = models.CharField(max_length=16, blank=True)
    affected = models.JSONField(default=list, blank=True)
    references = models.JSONField(default=list, blank=True)
    published = models.DateTimeField(null=True, blank=True)
    modified = models.DateTimeField()
    withdrawn = models.DateTimeField(null=True, blank=True)
    schema_version = models.CharField(max_length=16, blank=True)
    raw = models.JSONField(default=dict, blank=True)
    imported_at = models.DateTimeField(default=timezone.now)
    job = models.ForeignKey(
        "ingest.IngestJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["id"]
        indexes = [GinIndex(fields=["aliases"], name="advisory_aliases_gin")]

    def __str__(self) -> str:
        return self.id

    @property
    def all_ids(self) -> list[str]:
        return [self.id, *[a for a in self.aliases if a != self.id]]


class AdvisoryPackage(models.Model):
    """Which (ecosystem, normalised name) an advisory names: the matching index."""

    advisory = models.ForeignKey(Advisory, on_delete=models.CASCADE, related_name="packages")
    ecosystem = models.CharField(max_length=64)
    name = models.CharField(max_length=512)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["advisory", "ecosystem", "name"], name="advisorypackage_unique"
            )
        ]
        indexes = [models.Index(fields=["ecosystem", "name"], name="advisorypackage_eco_name")]

    def __str__(self) -> str:
        return f"{self.advisory_id}: {self.ecosystem}/{self.name}"


class KevEntry(models.Model):
    """A CISA Known Exploited Vulnerabilities catalog entry."""

    cve_id = models.CharField(max_length=32, primary_key=True)
    vendor_project = models.CharField(max_length=255, blank=True)
    product = models.CharField(max_length=255, blank=True)
    vulnerability_name = models.TextField(blank=True)
    date_added = models.DateField()
    short_description = models.TextField(blank=True)
    required_action = models.TextField(blank=True)
    due_date = models.DateField(null=True, blank=True)
    known_ransomware_campaign_use = models.CharField(max_length=32, blank=True)
    notes = models.TextField(blank=True)
    cwes = models.JSONField(default=list, blank=True)
    catalog_version = models.CharField(max_length=32, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.cve_id


class EpssScore(models.Model):
    """One day's EPSS score for one CVE; the history a score change is shown from."""

    cve_id = models.CharField(max_length=32)
    score_date = models.DateField()
    epss = models.FloatField()
    percentile = models.FloatField()
    model_version = models.CharField(max_length=32, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cve_id", "score_date"], name="epssscore_cve_date")
        ]

    def __str__(self) -> str:
        return f"{self.cve_id} {self.score_date}: {self.epss}"


class EpssLatest(models.Model):
    """The newest EPSS score per CVE, so findings join one row instead of the history."""

    cve_id = models.CharField(max_length=32, primary_key=True)
    score_date = models.DateField()
    epss = models.FloatField()
    percentile = models.FloatField()
    model_version = models.CharField(max_length=32, blank=True)

    def __str__(self) -> str:
        return f"{self.cve_id} {self.score_date}: {self.epss}"


# --- matching index of components ---------------------------------------------------------------


class ComponentPackage(models.Model):
    """A component's OSV package identity, written when its SBOM is matched, so a feed update
    finds the components of the packages it changed without re-reading every purl."""

    component = models.OneToOneField(
        "inventory.Component", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    sbom = models.ForeignKey("inventory.Sbom", on_delete=models.CASCADE, related_name="+")
    ecosystem = models.CharField(max_length=64)
    name = models.CharField(max_length=512)

    class Meta:
        indexes = [models.Index(fields=["ecosystem", "name"], name="componentpackage_eco_name")]

    def __str__(self) -> str:
        return f"{self.ecosystem}/{self.name}"


# --- findings (per team, through the project) --------------------------------------------------


class FindingKind(models.TextChoices):
    VULNERABILITY = "vulnerability", "Vulnerability"


class FindingSource(models.TextChoices):
    OSV = "osv", "OSV advisory match"
    SBOM = "sbom", "Reported in the SBOM (VDR/VEX)"


class MatchStatus(models.TextChoices):
    AFFECTED = "affected", "Affected"
    UNKNOWN = "unknown", "Unknown (version not comparable)"
    REPORTED = "reported", "Reported by the SBOM"


class TriageState(models.TextChoices):
    """CycloneDX VEX analysis states."""

    IN_TRIAGE = "in_triage", "In triage"
    EXPLOITABLE = "exploitable", "Exploitable"
    RESOLVED = "resolved", "Resolved"
    RESOLVED_WITH_PEDIGREE = "resolved_with_pedigree", "Resolved with pedigree"
    FALSE_POSITIVE = "false_positive", "False positive"
    NOT_AFFECTED = "not_affected", "Not affected"


OPEN_STATES = (TriageState.IN_TRIAGE, TriageState.EXPLOITABLE)


class Justification(models.TextChoices):
    CODE_NOT_PRESENT = "code_not_present", "Code not present"
    CODE_NOT_REACHABLE = "code_not_reachable", "Code not reachable"
    REQUIRES_CONFIGURATION = "requires_configuration", "Requires configuration"
    REQUIRES_DEPENDENCY = "requires_dependency", "Requires dependency"
    REQUIRES_ENVIRONMENT = "requires_environment", "Requires environment"
    PROTECTED_BY_COMPILER = "protected_by_compiler", "Protected by compiler"
    PROTECTED_AT_RUNTIME = "protected_at_runtime", "Protected at runtime"
    PROTECTED_AT_PERIMETER = "protected_at_perimeter", "Protected at perimeter"
    PROTECTED_BY_MITIGATING_CONTROL = (
        "protected_by_mitigating_control",
        "Protected by mitigating control",
    )


class Severity(models.TextChoices):
    CRITICAL = "critical", "Critical"
    HIGH = "high", "High"
    MEDIUM = "medium", "Medium"
    LOW = "low", "Low"
    NONE = "none", "None"
    UNKNOWN = "unknown", "Unknown"


# Baseline priority, 0-100: what static tools show, before contextual ranking.
# CVSS contributes up to 60, EPSS probability up to 25, KEV membership adds 15.
PRIORITY_CVSS_WEIGHT = 6.0
PRIORITY_EPSS_WEIGHT = 25.0
PRIORITY_KEV_BONUS = 15.0


def baseline_priority_expression() -> Any:
    return Least(
        Value(100.0),
        F("severity_score") * Value(PRIORITY_CVSS_WEIGHT)
        + Coalesce(F("epss"), Value(0.0)) * Value(PRIORITY_EPSS_WEIGHT)
        + Case(When(in_kev=True, then=Value(PRIORITY_KEV_BONUS)), default=Value(0.0)),
    )


class Finding(models.Model):
    """One problem in one component of one project version: (project version, component,
    advisory group). The fingerprint hashes exactly that triple, with the advisory group named
    by its canonical id (a CVE when any alias is one), so a GHSA and its CVE are one finding."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(
        max_length=24, choices=FindingKind.choices, default=FindingKind.VULNERABILITY
    )
    source = models.CharField(
        max_length=8, choices=FindingSource.choices, default=FindingSource.OSV
    )
    fingerprint = models.CharField(max_length=64, unique=True)
    project = models.ForeignKey("inventory.Project", on_delete=models.CASCADE, related_name="+")
    project_version = models.ForeignKey(
        "inventory.ProjectVersion", on_delete=models.CASCADE, related_name="+"
    )
    component = models.ForeignKey(
        "inventory.Component", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    component_key = models.CharField(max_length=2048)
    component_purl = models.CharField(max_length=2048, blank=True)
    component_name = models.CharField(max_length=512, blank=True)
    component_version = models.CharField(max_length=255, blank=True)
    ecosystem = models.CharField(max_length=64, blank=True)
    package_name = models.CharField(max_length=512, blank=True)
    advisory = models.ForeignKey(
        Advisory, null=True, blank=True, on_delete=models.SET_NULL, related_name="findings"
    )
    vuln_id = models.CharField(max_length=128)
    aliases = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    cve_id = models.CharField(max_length=32, blank=True)
    title = models.TextField(blank=True)
    match_status = models.CharField(max_length=16, choices=MatchStatus.choices)
    match_reason = models.TextField(blank=True)
    fixed_versions = models.JSONField(default=list, blank=True)
    cvss_score = models.FloatField(null=True, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.UNKNOWN)
    # CVSS, or a stand-in from the severity label when no vector is known (unknown = 5.0).
    severity_score = models.FloatField(default=5.0)
    in_kev = models.BooleanField(default=False)
    kev_date_added = models.DateField(null=True, blank=True)
    epss = models.FloatField(null=True, blank=True)
    epss_percentile = models.FloatField(null=True, blank=True)
    baseline_priority = models.GeneratedField(
        expression=baseline_priority_expression(),
        output_field=models.FloatField(),
        db_persist=True,
    )
    state = models.CharField(
        max_length=24, choices=TriageState.choices, default=TriageState.IN_TRIAGE
    )
    justification = models.CharField(max_length=40, choices=Justification.choices, blank=True)
    response = models.JSONField(default=list, blank=True)
    detail = models.TextField(blank=True)
    # What the SBOM said: its vulnerability entry and VEX analysis, kept as evidence.
    vex_evidence = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    auto_resolved = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-baseline_priority", "-id"]
        indexes = [
            # The list's default order, per team: keyset pages walk this index.
            models.Index(
                F("team"), F("baseline_priority").desc(), F("id").desc(), name="finding_team_prio"
            ),
            models.Index(
                F("team"),
                F("state"),
                F("baseline_priority").desc(),
                F("id").desc(),
                name="finding_team_state_prio",
            ),
            models.Index(
                F("team"),
                F("severity"),
                F("baseline_priority").desc(),
                F("id").desc(),
                name="finding_team_sev_prio",
            ),
            # KEV findings are few: a partial index keeps "KEV only" lists and counts small.
            models.Index(
                F("team"),
                F("baseline_priority").desc(),
                F("id").desc(),
                condition=Q(in_kev=True),
                name="finding_team_kev_prio",
            ),
            models.Index(fields=["project_version", "state"], name="finding_pv_state"),
            models.Index(fields=["project", "state"], name="finding_project_state"),
            models.Index(fields=["cve_id"], name="finding_cve"),
            models.Index(fields=["ecosystem", "package_name"], name="finding_package"),
            GinIndex(fields=["aliases"], name="finding_aliases_gin"),
            # Package search is a prefix match on the normalised and the component name.
            models.Index(
                fields=["package_name"],
                opclasses=["varchar_pattern_ops"],
                name="finding_package_prefix",
            ),
            models.Index(
                fields=["component_name"],
                opclasses=["varchar_pattern_ops"],
                name="finding_component_prefix",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.vuln_id} in {self.component_name}@{self.component_version}"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES


class FindingComment(models.Model):
    finding = models.ForeignKey(Finding, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_label = models.CharField(max_length=160)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"comment by {self.author_label}"


class AuditEvent(models.Model):
    """Append-only record of a change to anything a team triages: who, when, before, after, why.

    Generic by design (`subject_type` + `subject_id`) so certificate and reliability findings
    can write here too. A database trigger refuses UPDATE; rows are only ever inserted.
    """

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    subject_type = models.CharField(max_length=64)
    subject_id = models.BigIntegerField()
    action = models.CharField(max_length=40)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=160)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["subject_type", "subject_id", "created_at"], name="auditevent_subject"
            ),
            models.Index(fields=["team", "-created_at"], name="auditevent_team_created"),
        ]

    def __str__(self) -> str:
        return f"{self.subject_type}:{self.subject_id} {self.action} by {self.actor_label}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)
