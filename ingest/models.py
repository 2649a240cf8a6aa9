"""IngestJob: the durable record of every upload and import, and the source of truth for it."""

from __future__ import annotations

import uuid

from django.db import models

from trustrank.jobs.models import Job, JobStatus

__all__ = ["IngestJob", "IngestPayload", "JobKind", "JobStatus"]


class JobKind(models.TextChoices):
    SBOM = "sbom", "SBOM"
    OSV = "osv", "OSV advisories"
    KEV = "kev", "CISA KEV catalog"
    EPSS = "epss", "FIRST EPSS scores"
    NVD = "nvd", "NVD CVE severities"
    TRACES = "traces", "OTLP traces"
    CERTIFICATES = "certificates", "Certificates"
    TRUST_BUNDLE = "trust_bundle", "Trust bundle"
    TELEMETRY = "telemetry", "Cluster and GPU telemetry"
    VEX = "vex", "VEX document"


class IngestJob(Job):
    """One upload or import (the job kind "ingest"). The raw payload is stored
    (IngestPayload) before the request is answered; the job runner claims the row and renews
    its lease while a loader works, so a killed worker's job is found by the sweep and run
    again from the payload."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No single-column indexes on the team and the status: the two indexes of Meta lead
    # with them, and every receiver's insert and every claim's update paid for three more.
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="jobs",
                             db_index=False)
    kind = models.CharField(max_length=24, choices=JobKind.choices)
    # What the payload is about (projectName/projectVersion, environment, …), JSON only.
    params = models.JSONField(default=dict, blank=True)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the raw payload")
    size_bytes = models.BigIntegerField(default=0)
    content_type = models.CharField(max_length=120, blank=True)
    filename = models.CharField(max_length=255, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="ingestjob_team_created"),
            models.Index(fields=["status", "enqueued_at"], name="ingestjob_status_enqueued"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} job {self.id} ({self.status})"


class IngestPayload(models.Model):
    """The raw bytes of a job, kept apart so listing jobs never loads them."""

    job = models.OneToOneField(
        IngestJob, on_delete=models.CASCADE, primary_key=True, related_name="payload"
    )
    data = models.BinaryField()
    # What the receiver derived from `data` while validating it, for the worker (OTLP
    # metrics: the request as packed columns, `parsers.otlp_columns.columns_pack`), so
    # that the worker need not decompress and read the body again. `data` stays the
    # source of truth: a worker that cannot use this reads `data`.
    prepared = models.BinaryField(null=True, blank=True)

    def __str__(self) -> str:
        return f"payload of job {self.job_id}"
