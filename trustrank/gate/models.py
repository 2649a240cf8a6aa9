"""The build gate's per-team policy, and the failing answers already announced.

The gate itself stores nothing: it reads a project version's findings, their triage state and
the latest ranking run's decisions (trustrank.gate.evaluate)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class FailOn(models.TextChoices):
    """The least urgent SSVC decision that fails a build (spelled as the CERT/CC table)."""

    IMMEDIATE = "immediate", "Immediate only"
    OUT_OF_CYCLE = "out-of-cycle", "Out-of-cycle or immediate"


# Decisions that fail the gate, per policy.
FAILING_DECISIONS: dict[str, tuple[str, ...]] = {
    FailOn.IMMEDIATE: ("immediate",),
    FailOn.OUT_OF_CYCLE: ("immediate", "out-of-cycle"),
}


class GatePolicy(models.Model):
    """A team's gate policy. A team without a row uses the defaults: fail on any immediate
    finding, old or new."""

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE, related_name="+")
    fail_on = models.CharField(max_length=16, choices=FailOn.choices, default=FailOn.IMMEDIATE)
    # Only findings whose (vulnerability, component name) pair the project's previous version
    # (by upload time) did not have fail the gate.
    new_only = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by_label = models.CharField(max_length=160, blank=True)

    def __str__(self) -> str:
        return f"gate policy of team {self.team_id}"


class GateFailure(models.Model):
    """One failing, complete gate answer per (project version, ranking run): what makes the
    `gate.failed` notification go out once however often a pipeline asks."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    project_version = models.ForeignKey(
        "inventory.ProjectVersion", on_delete=models.CASCADE, related_name="+"
    )
    # The run whose decisions failed it (0: no run had ranked anything yet).
    ranking_run_id = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project_version", "ranking_run_id"], name="gatefailure_pv_run_unique"
            )
        ]

    def __str__(self) -> str:
        return f"gate failed: project version {self.project_version_id}, run {self.ranking_run_id}"
