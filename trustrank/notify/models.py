"""Webhooks a team admin configured, and what is sent to them.

- `Webhook`: where to send (URL, format), which events, and the secret the body is signed
  with. The secret is write-only: stored so the signature can be computed, never shown.
- `NotifyBatch` (the job kind `notify_dispatch`): one row per batch of events, written by
  whoever emits them (a ranking run writes one row naming itself, however many findings
  changed). Its worker fans the batch out into `NotifyEvent` and `Delivery` rows and sends
  the deliveries; a later row of the same kind (source `retry`, ready at the next attempt)
  carries the deliveries to try again. Killed anywhere, the job system runs it again.
- `Delivery`: one event to one webhook, with its status, attempts and next attempt.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from trustrank.jobs.models import Job


class NotifyEventName(models.TextChoices):
    FINDING_IMMEDIATE = "finding.immediate", "A finding became immediate"
    FINDING_DECISION_CHANGED = "finding.decision_changed", "A finding's decision changed"
    GATE_FAILED = "gate.failed", "A gate failed"
    FEED_KEV_ADDED = "feed.kev_added", "A KEV addition hits one of the team's findings"
    JOB_FAILED = "job.failed", "A job failed"


# Sent only by "send a test ping"; no webhook subscribes to it.
PING = "ping"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (signed)"
    SLACK = "slack", "Slack incoming webhook"
    JIRA = "jira", "Jira issue"


class Webhook(models.Model):
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    url = models.CharField(max_length=2048)
    events = models.JSONField(default=list)
    # Write-only: the HMAC key (the Jira API token for format jira). Never echoed, never logged.
    secret = models.TextField()
    format = models.CharField(max_length=8, choices=WebhookFormat.choices,
                              default=WebhookFormat.JSON)
    enabled = models.BooleanField(default=True)
    jira_project_key = models.CharField(max_length=64, blank=True)
    jira_user = models.CharField(max_length=255, blank=True)
    created_by_label = models.CharField(max_length=160, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "enabled"], name="webhook_team_enabled")]

    def __str__(self) -> str:
        return f"webhook {self.pk} ({self.format}) of team {self.team_id}"


class BatchSource(models.TextChoices):
    EVENTS = "events", "Events given whole"
    RANKING_RUN = "ranking_run", "Decision changes of a ranking run"
    KEV = "kev", "KEV additions"
    PING = "ping", "A test ping"
    DELIVER = "deliver", "Deliveries to one webhook"
    RETRY = "retry", "Deliveries to try again"


class NotifyBatch(Job):
    """A batch of events to fan out (or, source `retry`, deliveries to send again)."""

    # Null for a site-wide batch (a KEV import): the fan-out finds the teams it hits.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    source = models.CharField(max_length=16, choices=BatchSource.choices)
    event = models.CharField(max_length=40, blank=True)
    # Source events: the payloads; kev: the CVE ids added; ping: nothing.
    items = models.JSONField(default=list, blank=True)
    # Source ranking_run: the run; ping: the webhook.
    ref_id = models.BigIntegerField(null=True, blank=True)
    ready_at = models.DateTimeField(default=timezone.now)
    fanned_out = models.BooleanField(default=False)
    counts = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "ready_at"], name="notifybatch_status_ready")]

    def __str__(self) -> str:
        return f"notify batch {self.pk} ({self.source} {self.event})"


class NotifyEvent(models.Model):
    """One event for one team; its payload is shared by the deliveries to every webhook."""

    batch = models.ForeignKey(NotifyBatch, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    event = models.CharField(max_length=40)
    payload = models.JSONField()
    occurred_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.event} for team {self.team_id}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    RETRYING = "retrying", "Retrying"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


OPEN_STATUSES = (DeliveryStatus.PENDING, DeliveryStatus.SENDING, DeliveryStatus.RETRYING)


class Delivery(models.Model):
    """One event to one webhook. `round` is the NotifyBatch job that sends it next."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    notify_event = models.ForeignKey(NotifyEvent, on_delete=models.CASCADE, related_name="+")
    round = models.ForeignKey(
        NotifyBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    event = models.CharField(max_length=40)
    status = models.CharField(max_length=12, choices=DeliveryStatus.choices,
                              default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    response_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["round", "status"], name="delivery_round_status"),
            models.Index(fields=["webhook", "-created_at", "-id"], name="delivery_webhook_new"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.uuid} ({self.status})"
