"""What a team runs: projects, their versions, SBOMs and the components in them."""

from __future__ import annotations

import uuid

from django.db import models


class Project(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="project_team_name_unique")
        ]

    def __str__(self) -> str:
        return self.name


class ProjectVersion(models.Model):
    """A name + version pair, which Dependency-Track calls a project (hence the uuid)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=255, blank=True)
    current_sbom = models.ForeignKey(
        "Sbom", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__name", "version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "version"], name="projectversion_project_version_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.project.name}@{self.version}" if self.version else self.project.name


class Sbom(models.Model):
    """One uploaded SBOM (CycloneDX, or SPDX parsed to the same form). The newest per project
    version is its current inventory (ProjectVersion.current_sbom); older ones stay as
    history."""

    project_version = models.ForeignKey(
        ProjectVersion, on_delete=models.CASCADE, related_name="sboms"
    )
    job = models.ForeignKey(
        "ingest.IngestJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    digest = models.CharField(max_length=64)
    format = models.CharField(max_length=8)  # json | xml (CycloneDX) | spdx
    spec_version = models.CharField(max_length=8)
    serial_number = models.CharField(max_length=255, blank=True)
    bom_version = models.PositiveIntegerField(default=1)
    bom_timestamp = models.DateTimeField(null=True, blank=True)
    tools = models.JSONField(default=list, blank=True)
    described_component = models.JSONField(default=dict, blank=True)
    component_count = models.PositiveIntegerField(default=0)
    dependency_count = models.PositiveIntegerField(default=0)
    vulnerability_count = models.PositiveIntegerField(default=0)
    # Parsed once at load (trustrank.parsers.cyclonedx_vulns.vulnerability_to_json): the
    # BOM's own VDR/VEX entries, which vulnerability matching reads from here.
    vulnerabilities = models.JSONField(default=list, blank=True)
    # The services the BOM declares (ParsedService.as_dict).
    services = models.JSONField(default=list, blank=True)
    # What was wrong in the document but did not refuse it (ParsedBom.warnings; a CycloneDX
    # BOM's unreadable vulnerability section): the first SBOM_WARNINGS_KEPT, and how many.
    warnings = models.JSONField(default=list, blank=True)
    warning_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    # When vulnerability matching last covered this SBOM whole (after its load): until then
    # Dependency-Track's token answers `processing: true`, so a CI plugin that polls the
    # token and then reads findings sees them. The load's job matches in its own transaction
    # (ingest/loaders/sbom.py), so only an SBOM stored before it did can lack it.
    matched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project_version", "digest"], name="sbom_projectversion_digest_unique"
            )
        ]

    def __str__(self) -> str:
        return f"SBOM {self.serial_number or self.digest[:12]} ({self.spec_version})"


class Component(models.Model):
    """A component as listed in one SBOM; nested components are flattened with their parent's
    bom-ref kept in `parent_ref`."""

    sbom = models.ForeignKey(Sbom, on_delete=models.CASCADE, related_name="components")
    bom_ref = models.CharField(max_length=1024, blank=True)
    parent_ref = models.CharField(max_length=1024, blank=True)
    type = models.CharField(max_length=32, blank=True)
    group = models.CharField(max_length=512, blank=True)
    name = models.CharField(max_length=512)
    version = models.CharField(max_length=255, blank=True)
    purl = models.CharField(max_length=2048, blank=True)
    cpe = models.CharField(max_length=1024, blank=True)
    hashes = models.JSONField(default=dict, blank=True)
    licenses = models.JSONField(default=list, blank=True)
    supplier = models.CharField(max_length=512, blank=True)
    scope = models.CharField(max_length=16, blank=True)
    # Code packages the SBOM says the component holds (trustrank.parsers.cyclonedx_packages):
    # the ranking maps a span's code.namespace to the component through them first.
    packages = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name", "version"]
        indexes = [
            models.Index(fields=["sbom", "name"], name="component_sbom_name"),
            models.Index(fields=["purl"], name="component_purl"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


class ComponentDependency(models.Model):
    """An edge of the SBOM's dependency graph, by bom-ref."""

    sbom = models.ForeignKey(Sbom, on_delete=models.CASCADE, related_name="dependencies")
    ref = models.CharField(max_length=1024)
    depends_on = models.CharField(max_length=1024)

    class Meta:
        indexes = [models.Index(fields=["sbom", "ref"], name="componentdep_sbom_ref")]

    def __str__(self) -> str:
        return f"{self.ref} -> {self.depends_on}"
