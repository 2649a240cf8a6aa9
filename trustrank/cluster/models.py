"""Scheduling replay runs: one row per run, the source of truth for its progress and result."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ReplayMode(models.TextChoices):
    INFLATION = "inflation", "Inflation (FGD paper)"
    TIMELINE = "timeline", "Timeline (priority policies)"


class ReplayStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ReplayRun(models.Model):
    """A replay of a pod/node trace through placement strategies or priority policies.

    The uploaded CSVs are kept on the row (empty = the bundled openb trace) so the worker,
    a retry, or a re-run reads the very bytes that were validated when the run was made.
    A worker claims the row with a conditional UPDATE on `status='queued'` (or on a running
    row whose lease has lapsed: its worker died) and renews the lease as it reports progress.
    """

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="replay_runs")
    mode = models.CharField(max_length=16, choices=ReplayMode.choices)
    status = models.CharField(
        max_length=16, choices=ReplayStatus.choices, default=ReplayStatus.QUEUED, db_index=True
    )
    # JSON only: strategies, seeds, policies, placement, compress, node_fraction.
    parameters = models.JSONField(default=dict, blank=True)
    trace_label = models.CharField(max_length=255, blank=True)
    pods_csv = models.BinaryField(null=True, blank=True)
    nodes_csv = models.BinaryField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    submitter_label = models.CharField(max_length=160, blank=True)
    phase = models.CharField(max_length=60, blank=True)
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["team", "-created_at"], name="replayrun_team_created")]

    def __str__(self) -> str:
        return f"replay run {self.pk} ({self.mode}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (ReplayStatus.DONE, ReplayStatus.FAILED)

    @property
    def progress_pct(self) -> int:
        if self.status == ReplayStatus.DONE:
            return 100
        if not self.progress_total:
            return 0
        return min(100, int(100 * self.progress_done / self.progress_total))

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
