"""The abstract job row every kind of long work shares.

One status vocabulary, one spelling of who asked, one lease: a worker claims a row with a
conditional UPDATE, a heartbeat thread renews `lease_until` while the handler works, and the
sweep re-queues a row whose lease lapsed (its worker died). `backend_pid` and `backend_start`
name the PostgreSQL session the claimant works in, so a later claimant or the sweep can end
a dead worker's statement instead of waiting behind its locks.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


FINISHED = (JobStatus.DONE, JobStatus.FAILED)


class JobClass(models.TextChoices):
    """Interactive work (an SBOM from CI, a triage, a team's own re-rank) goes ahead of batch
    work (replay, a large export, a periodic full re-rank), which runs in a bounded number of
    slots shared fairly among teams."""

    INTERACTIVE = "interactive", "Interactive"
    BATCH = "batch", "Batch"


class Job(models.Model):
    """Fields every job kind has. A kind adds its own fields (its input, its result)."""

    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED
    )
    job_class = models.CharField(
        max_length=12, choices=JobClass.choices, default=JobClass.INTERACTIVE
    )
    # Lower is more urgent (X-Priority); 10 is the fallback.
    priority = models.PositiveSmallIntegerField(default=10)
    phase = models.CharField(max_length=60, blank=True)
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When the job's message was last sent (the sweep re-sends one lost by the broker).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=160, blank=True)
    backend_pid = models.IntegerField(null=True, blank=True)
    backend_start = models.DateTimeField(null=True, blank=True)
    # Who asked: a person, or an API key (and its label as it read then).
    requested_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_label = models.CharField(max_length=160, blank=True)

    class Meta:
        abstract = True

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def phase_shown(self) -> str:
        """The phase where it says more than the status: a finished job's phase repeats it
        ("done", "failed"), and pages that showed both read "done done"."""
        return "" if self.phase in ("", self.status) else self.phase

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    @property
    def progress_pct(self) -> int:
        if self.status == JobStatus.DONE:
            return 100
        if not self.progress_total:
            return 0
        return min(100, int(100 * self.progress_done / self.progress_total))

    def requested_by_set(self, principal: Any) -> None:
        """Record who asked, from a Principal (trustrank.accounts.principal)."""
        user = getattr(principal, "user", None)
        key = getattr(principal, "api_key", None)
        self.requested_by_key = key
        self.requested_by_user = (
            user if key is None and user is not None and user.is_authenticated else None
        )
        self.requested_by_label = str(getattr(principal, "label", ""))[:160]
