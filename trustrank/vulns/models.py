"""Vulnerability intelligence: global feeds (OSV advisories, CISA KEV, FIRST EPSS) and the
matching index of components. The findings themselves live in trustrank.findings."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
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


class NvdSeverity(models.Model):
    """NVD's CVSS score of one CVE (trustrank.parsers.nvd picks the metric: v3.1, else
    v3.0, else v4.0, else v2; NVD's own before the CNA's). Site-wide reference data like
    KevEntry: a vulnerability finding whose advisory carries no CVSS takes it."""

    cve_id = models.CharField(max_length=32, primary_key=True)
    version = models.CharField(max_length=8)
    vector = models.CharField(max_length=255)
    score = models.FloatField()
    severity = models.CharField(max_length=16)
    # Who scored it (nvd@nist.gov, or the CNA) and whether NVD lists it as Primary.
    source = models.CharField(max_length=128, blank=True)
    source_type = models.CharField(max_length=16, blank=True)
    published = models.DateTimeField(null=True, blank=True)
    last_modified = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.cve_id}: CVSS {self.score:g} ({self.vector})"
