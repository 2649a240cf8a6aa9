"""What is recorded about findings rather than the findings themselves: the append-only audit
trail and its checkpoints, comments, a team's triage policy, bulk triage jobs, and the
evidence changes that ask for a ranking run. Registered with the app by `models`, which
imports them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from trustrank.findings.choices import ActorKind
from trustrank.jobs.models import Job


class AuditEvent(models.Model):
    """Append-only record of every change anything in TrustRank makes to what a team
    triages or trusts: finding creation, triage, comments, auto-resolution and reopening,
    identity mappings, caller policies, feed changes. Who (a user, an API key or a system job),
    when, before, after and why.

    The database refuses UPDATE, DELETE and TRUNCATE on this table (triggers, migration 0002);
    `save()` refuses a second save too, so the mistake shows up before it reaches PostgreSQL.
    Events about a finding point at it; others name their subject (`subject_type`,
    `subject_id`). Site-wide events (feed imports) have no team.
    """

    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    finding = models.ForeignKey(
        "findings.Finding", null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    subject_type = models.CharField(max_length=64, blank=True)
    subject_id = models.CharField(max_length=255, blank=True)
    environment = models.CharField(max_length=120, blank=True)
    action = models.CharField(max_length=40)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=160)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Hash chain per team (site-wide events form their own chain): the digest of the team's
    # previous event and this event's own digest over its content and that predecessor.
    prev_digest = models.CharField(max_length=64, blank=True, db_default="")
    digest = models.CharField(max_length=64, blank=True, db_default="")

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["finding", "created_at"], name="auditevent_finding_at"),
            models.Index(fields=["team", "-created_at"], name="auditevent_team_at"),
            models.Index(
                fields=["team", "environment", "-created_at"], name="auditevent_team_env_at"
            ),
            # The chain's order (verification streams it) and the audit log's keyset pages.
            models.Index(fields=["team", "id"], name="auditevent_team_id"),
            models.Index(fields=["team", "action", "id"], name="auditevent_team_action_id"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)


class AuditCheckpoint(models.Model):
    """A signed statement of where every audit chain stood (`manage.py audit_checkpoint`):
    each chain's head event id, event count and head digest at `created_at`, as canonical
    JSON (`statement`, exactly the bytes signed), signed with the site's Ed25519 key. A chain
    rewritten and re-sealed afterwards is internally consistent again, but its checkpointed
    head no longer has the digest signed here (`manage.py audit_verify` says so)."""

    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.CharField(max_length=160, blank=True)
    statement = models.TextField()
    # Base64: the 64-byte signature and the 32-byte raw public key; the fingerprint is
    # "sha256:" and the hex SHA-256 of that raw key.
    signature = models.CharField(max_length=128)
    public_key = models.CharField(max_length=64)
    key_fingerprint = models.CharField(max_length=80)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"audit checkpoint {self.pk} ({self.created_at:%Y-%m-%d %H:%M:%S})"


class BulkTriageJob(Job):
    """One bulk triage too large to apply within the request: which findings (explicit `ids`,
    with optional versions, or a `filter` of the findings list, re-evaluated by the worker
    within `team_ids`), what to set, who asked and why, and how far it got. The worker walks
    the selection by id from `cursor`, one transaction per batch, so a second delivery picks
    up where the first stopped. The job kind "bulk_triage" (interactive work: a triage)."""

    # The first team of the selection: whose queue the job counts in.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    team_ids = ArrayField(models.BigIntegerField(), default=list)
    ids = models.JSONField(null=True, blank=True)
    versions = models.JSONField(default=dict, blank=True)
    filter = models.JSONField(null=True, blank=True)
    changes = models.JSONField(default=dict)
    reason = models.TextField()
    cursor = models.BigIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "created_at"], name="bulktriage_status")]

    def __str__(self) -> str:
        return f"bulk triage {self.pk} ({self.status})"


class FindingGroupsJob(Job):
    """A page of finding groups (`findings.groups`) computed and kept in PostgreSQL: one
    that took `TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS` or more in a web request
    (recorded done, `worker` "web"), or grouped again by a worker once the findings moved
    on (the job kind "finding_groups", batch work). `key` names the page apart from the
    findings' generation (the teams, the filter's SQL, `by` and the slice); `generation` is
    the one it was computed at; `page` the `GroupPage` (pickled: written and read by this
    code only). While a newer generation's page is grouped again, a request is answered
    with the latest done page of its key, marked as of when it was computed."""

    # The first of the teams: whose batch slots the job counts in.
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    team_ids = ArrayField(models.BigIntegerField())
    key = models.CharField(max_length=64)
    # The query string the findings FilterSet read (`filter_querydict`), by, and the slice.
    filter = models.JSONField(default=dict)
    by = models.CharField(max_length=16)
    limit = models.PositiveIntegerField()
    offset = models.BigIntegerField()
    generation = models.CharField(max_length=200, blank=True)
    page = models.BinaryField(null=True)
    seconds = models.FloatField(null=True)
    # Not grouped again before this (`TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS`).
    not_before = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["key", "-finished_at"], name="findinggroups_key_done",
                                condition=models.Q(status="done"))]
        constraints = [
            # One regrouping of a page at a time.
            models.UniqueConstraint(fields=["key"], name="findinggroups_one_pending",
                                    condition=models.Q(status__in=["queued", "running"])),
        ]

    def __str__(self) -> str:
        return f"finding groups {self.pk} ({self.status})"


class EvidenceChange(models.Model):
    """The evidence behind a team's findings changed (an SBOM matched, traces, certificates,
    a deployment, cluster diagnoses); `team` null: a shared feed (OSV, KEV, EPSS) that
    concerns every team. Loads record one here, in their own transaction, instead of calling
    the ranking app above them; ranking's beat sweep takes the rows and turns them into
    debounced ranking runs. Append-only rows, deleted as they are taken: recording is a
    plain INSERT that never waits on another load, and a row is gone only once the
    transaction that asked for its run commits."""

    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    what = models.CharField(max_length=200)
    # What kind of evidence (an ingest job's kind, such as "traces"; '' when unsaid): the
    # ranking app picks the debounce of the run by it (a trace window ranks within
    # seconds, an SBOM waits for the loads that follow it).
    kind = models.CharField(max_length=32, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.what} (team {self.team_id})"


class TriagePolicy(models.Model):
    """A team's due dates by ranking decision, in days from when the decision was first given;
    no days means no due date. A team without a row uses the defaults below."""

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE, related_name="+")
    immediate_days = models.PositiveIntegerField(null=True, blank=True, default=1)
    out_of_cycle_days = models.PositiveIntegerField(null=True, blank=True, default=7)
    scheduled_days = models.PositiveIntegerField(null=True, blank=True, default=30)
    defer_days = models.PositiveIntegerField(null=True, blank=True, default=None)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"triage policy of team {self.team_id}"


class Comment(models.Model):
    finding = models.ForeignKey(
        "findings.Finding", on_delete=models.CASCADE, related_name="comments"
    )
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
