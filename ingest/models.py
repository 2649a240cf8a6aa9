"""IngestJob: the durable record of every upload and import, and the source of truth for it."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class JobKind(models.TextChoices):
    SBOM = "sbom", "SBOM"
    OSV = "osv", "OSV advisories"
    KEV = "kev", "CISA KEV catalog"
    EPSS = "epss", "FIRST EPSS scores"
    TRACES = "traces", "OTLP traces"
    CERTIFICATES = "certificates", "Certificates"
    TRUST_BUNDLE = "trust_bundle", "Trust bundle"
    TELEMETRY = "telemetry", "Cluster and GPU telemetry"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class IngestJob(models.Model):
    """One upload or import. The raw payload is stored (IngestPayload) before the request is
    answered; workers claim the row with a conditional UPDATE and renew a lease while they
    work, so a killed worker's job is found by the sweep and run again from the payload."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No single-column indexes on the team and the status: the two indexes of Meta lead
    # with them, and every receiver's insert and every claim's update paid for three more.
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="jobs",
                             db_index=False)
    kind = models.CharField(max_length=24, choices=JobKind.choices)
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED
    )
    # What the payload is about (projectName/projectVersion, environment, …), JSON only.
    params = models.JSONField(default=dict, blank=True)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the raw payload")
    size_bytes = models.BigIntegerField(default=0)
    content_type = models.CharField(max_length=120, blank=True)
    filename = models.CharField(max_length=255, blank=True)
    priority = models.PositiveSmallIntegerField(default=10)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    api_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL)
    submitter_label = models.CharField(max_length=160, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    phase = models.CharField(max_length=40, blank=True)
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(null=True, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="ingestjob_team_created"),
            models.Index(fields=["status", "enqueued_at"], name="ingestjob_status_enqueued"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} job {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (JobStatus.DONE, JobStatus.FAILED)

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


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
