"""Ranking runs and what they decided.

A run gathers the team's evidence (trustrank.ranking.inputs), hands it to the pure engine
(trustrank.risk) and stores, per open finding, its rank, SSVC decision, score and explanation
(RankedFinding, pointing at a shared RankContext), and a RankChange row for each finding that
moved. The ranks live in their own narrow table, not on the findings: a run rewrites up to a
million of them, and a row of the wide, heavily indexed findings table costs many times
more to rewrite. The weights and their version, and a digest of the inputs, are kept with
the run, so a past rank can be reproduced.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from trustrank.jobs.models import Job, JobStatus

# One status vocabulary for every kind of job (the name RunStatus is kept for readers).
RunStatus = JobStatus


class RankingRun(Job):
    """One ranking of one team's open findings: the job kind "ranking_run"."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    trigger = models.CharField(max_length=64, blank=True)
    # A debounced run does not start before this time (loads that follow closely share it).
    not_before = models.DateTimeField(default=timezone.now)
    incremental = models.BooleanField(default=False)
    weights = models.JSONField(default=dict, blank=True)
    weights_version = models.CharField(max_length=40, blank=True)
    inputs_digest = models.CharField(max_length=64, blank=True)
    results_digest = models.CharField(max_length=64, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    # What the graph said about each service (a ServiceResults row, by its digest; '' before
    # the run is done). Runs that computed the same share one row.
    services_digest = models.CharField(max_length=64, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="rankingrun_team_created"),
            models.Index(
                fields=["team", "status"],
                name="rankingrun_team_pending",
                condition=Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"ranking run {self.pk} ({self.status})"

    @property
    def services(self) -> dict[str, Any]:
        """The run's per-service results by environment and name ({} before it is done);
        one query per access."""
        out: dict[str, Any] = {}
        if not self.services_digest:
            return out
        for env, name, data in ServiceResultRow.objects.filter(
                digest=self.services_digest).values_list("environment", "name", "data"):
            out.setdefault(env, {})[name] = data
        return out


class ServiceResults(models.Model):
    """What the graph said about each service of a team, as one set of `ServiceResultRow`s.
    Kept so the service map and pages read it instead of analysing the graph again on every
    request; keyed by the digest of its content, so the runs that found the same (most
    incremental runs, where only findings moved) share one set instead of each writing a
    row per service. The set's rows are written in the transaction that writes this row."""

    digest = models.CharField(max_length=64, primary_key=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.digest[:12]


class ServiceResultRow(models.Model):
    """One service's result in a `ServiceResults` set (`digest`): {trust, identity_trust,
    exposure, exposure_reason, path, hops}, its exposure also a column. A row per service,
    not one document per set: a page of 50 services of 100,000 reads its own 50 rows, and
    a filter by exposure reads an index, where a document of 100 MB was read whole by
    each statement."""

    pk = models.CompositePrimaryKey("digest", "environment", "name")
    digest = models.CharField(max_length=64)
    environment = models.TextField()
    name = models.TextField()
    exposure = models.TextField(blank=True)
    data = models.JSONField()

    class Meta:
        indexes = [
            models.Index(fields=["digest", "environment", "exposure", "name"],
                         name="serviceresultrow_exposure"),
        ]

    def __str__(self) -> str:
        return f"{self.environment}/{self.name}"


class RankContext(models.Model):
    """What the engine said about a finding apart from its rank and score: exposure,
    reachability, exploitation, automatable, human impact, trust, the service and its path
    from the internet, and the explanation's factors (name, value, effect, source,
    confidence). Findings ranked in the same context share one row (keyed by the digest of
    its content), which keeps a million ranked findings to a few thousand explanations."""

    digest = models.CharField(max_length=64, primary_key=True)
    data = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.digest[:12]


class RankedFinding(models.Model):
    """The latest rank of one open finding: in its team's queue (`rank`) and in the queue of
    the environment of its most urgent context (`env_rank`; environment '' when the finding
    runs nowhere).

    A run writes up to a million of these rows, so the table keeps only the indexes its
    readers walk (the primary key and the two queue orders) and no database foreign keys:
    their checks and the run and context indexes cost about half of every insert. Deletion
    still cascades in the ORM (a finding's or team's delete removes its rows), and a ranking
    run drops the rank of a finding deleted while it ran (services/store.py)."""

    finding = models.OneToOneField(
        "findings.Finding", on_delete=models.CASCADE, primary_key=True, related_name="ranked",
        db_constraint=False,
    )
    team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, related_name="+", db_index=False,
        db_constraint=False,
    )
    run = models.ForeignKey(
        RankingRun, null=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False,
        db_index=False,
    )
    rank = models.IntegerField()
    env_rank = models.IntegerField()
    environment = models.CharField(max_length=120, blank=True)
    score = models.FloatField()
    decision = models.CharField(max_length=16)
    context = models.ForeignKey(
        RankContext, on_delete=models.PROTECT, related_name="+", db_constraint=False,
        db_index=False,
    )
    # The queue key (`trustrank.risk.queue_key`): ascending in queue order, the finding id
    # breaking ties. Readers order by (team, qkey, finding) and count a rank from the bucket
    # counts of `trustrank.ranking.positions` (`trustrank.ranking.ranks`), not from `rank`
    # and `env_rank`, which hold the ranks as of the run that last wrote the row.
    qkey = models.BigIntegerField(default=0)
    # The finding's component search group (`findings.SearchGroup`, `findings_search_group`):
    # a package search reads each matching group's findings in queue order from its index
    # (trustrank/findings/search_groups.py). Written by the store with the row; the store also
    # sets it on rows whose finding was written since the previous run (a finding's component
    # rarely changes, and its own values, hence its row, need not). NULL only on rows a store
    # before ranking.0012 wrote; the next store sets those.
    search_group = models.BigIntegerField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["team", "qkey", "finding"], name="rankedfinding_team_qkey"),
            models.Index(
                fields=["team", "search_group", "qkey", "finding"],
                name="rankedfinding_team_group",
            ),
            models.Index(
                fields=["team", "environment", "qkey", "finding"],
                name="rankedfinding_team_env_qkey",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.rank} finding {self.finding_id}"


class RankChange(models.Model):
    """A finding's rank history: one row per run in which its own key, score or decision
    changed, or in which it entered or left the queue (a finding whose rank shifted only
    because others moved writes nothing). `rank` and `previous_rank` are counted from the
    keys when the run wrote the row (after and before its writes); `qkey` and
    `previous_qkey` are the finding's queue key after and before, so that the ranks of a
    past run can be rebuilt (a finding's key as of run R is the `qkey` of its latest change
    at or before R, else the `previous_qkey` of its earliest change after R, else its
    current key). Rows written before the keys were recorded have neither.

    Like RankedFinding the table has no database foreign keys (their deferred checks were
    most of a large run's commit). Deletion still cascades in the ORM, and the readers
    join the finding, so a row outliving its finding is never shown."""

    # No single-column indexes of their own: the two below lead with these columns, and a
    # run that shifts twenty thousand ranks wrote five index entries per row, not three.
    run = models.ForeignKey(
        RankingRun, on_delete=models.CASCADE, related_name="changes", db_constraint=False,
        db_index=False,
    )
    finding = models.ForeignKey(
        "findings.Finding", on_delete=models.CASCADE, related_name="rank_changes",
        db_constraint=False, db_index=False,
    )
    rank = models.IntegerField(null=True)
    score = models.FloatField(null=True)
    decision = models.CharField(max_length=16, blank=True)
    previous_rank = models.IntegerField(null=True)
    previous_score = models.FloatField(null=True)
    previous_decision = models.CharField(max_length=16, blank=True)
    # Which factors moved, and by how much: [{"factor", "before", "after"}].
    why = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now)
    qkey = models.BigIntegerField(null=True)
    previous_qkey = models.BigIntegerField(null=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["finding", "at"], name="rankchange_finding_at"),
            models.Index(fields=["run"], name="rankchange_run"),
        ]

    def __str__(self) -> str:
        return f"{self.finding_id}: {self.previous_rank} -> {self.rank}"
