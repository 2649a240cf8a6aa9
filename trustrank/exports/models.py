"""One row per export of findings: what was asked (format, filters, as of when), how far it
got, and what was handed out (rows, size, SHA-256). A streamed export has a row too, finished
when its last byte is written; a big one is a job (exports_run) whose row the pages poll."""

from __future__ import annotations

from django.db import models

from trustrank.jobs.models import Job, JobStatus


class ExportFormat(models.TextChoices):
    CSV = "csv", "CSV"
    JSON = "json", "JSON"
    CYCLONEDX_VEX = "cyclonedx-vex", "CycloneDX 1.6 VEX"
    CSAF_VEX = "csaf-vex", "CSAF 2.0 VEX"
    OPENVEX = "openvex", "OpenVEX 0.2"
    PDF = "pdf", "PDF report"
    HTML = "html", "HTML report"


# One status vocabulary for every kind of job (the name ExportStatus is kept for readers).
ExportStatus = JobStatus


class Export(Job):
    """One export (the job kind "export" when it is written by a worker)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    format = models.CharField(max_length=16, choices=ExportFormat.choices)
    # The findings filters as given (FindingFilterSet names, lists for repeated ones).
    filter_params = models.JSONField(default=dict, blank=True)
    as_of = models.DateTimeField(null=True, blank=True)
    ranking_run = models.ForeignKey(
        "ranking.RankingRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Streamed straight back to the caller (no file kept) or written by the exports_run job.
    streamed = models.BooleanField(default=False)
    rows = models.BigIntegerField(null=True, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    # Relative to settings.TRUSTRANK_EXPORT_DIR.
    file_path = models.CharField(max_length=255, blank=True)
    # What the file says about itself: the audit chain's status, how ranks were obtained.
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="export_team_created")]

    def __str__(self) -> str:
        return f"{self.format} export {self.pk} ({self.status})"

    @property
    def extension(self) -> str:
        return {
            ExportFormat.CSV: "csv",
            ExportFormat.JSON: "json",
            ExportFormat.CYCLONEDX_VEX: "cdx.json",
            ExportFormat.CSAF_VEX: "csaf.json",
            ExportFormat.OPENVEX: "openvex.json",
            ExportFormat.PDF: "pdf",
            ExportFormat.HTML: "html",
        }[ExportFormat(self.format)]

    @property
    def filename(self) -> str:
        return f"trustrank-findings-{self.pk}.{self.extension}"

    @property
    def content_type(self) -> str:
        return {
            ExportFormat.CSV: "text/csv; charset=utf-8",
            ExportFormat.JSON: "application/json",
            ExportFormat.CYCLONEDX_VEX: "application/vnd.cyclonedx+json",
            ExportFormat.CSAF_VEX: "application/json",
            ExportFormat.OPENVEX: "application/json",
            ExportFormat.PDF: "application/pdf",
            ExportFormat.HTML: "text/html; charset=utf-8",
        }[ExportFormat(self.format)]
