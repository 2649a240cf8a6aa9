"""A team's Jira settings and the Jira issues made for its findings."""

from __future__ import annotations

from django.db import models


class JiraConfig(models.Model):
    """Where a team's Jira issues go and how TrustRank signs in there.

    `user` set: Jira Cloud basic auth (`user` is the account's email, `token` its API
    token). `user` blank: a Data Center / Server personal access token, sent as Bearer. The
    token is write-only: no page or API answer shows it, only whether one is set.
    `priorities` maps an SSVC decision ("immediate", "out-of-cycle", "scheduled", "defer")
    to the name of a Jira priority; a decision without one leaves Jira's default.
    """

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE, related_name="+")
    base_url = models.CharField(max_length=2048)
    project_key = models.CharField(max_length=64)
    issue_type = models.CharField(max_length=64, default="Bug")
    user = models.CharField(max_length=254, blank=True)
    token = models.TextField(blank=True)
    priorities = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=160, blank=True)

    def __str__(self) -> str:
        return f"Jira {self.project_key} at {self.base_url} for team {self.team_id}"


class JiraIssueLink(models.Model):
    """The Jira issue made for a finding: one per finding and Jira project (base URL and
    project key), so a second event about the finding adds to the issue instead of opening
    another. `url` is the issue's page (`<base>/browse/<key>`), `api_url` Jira's `self`."""

    finding = models.ForeignKey(
        "findings.Finding", on_delete=models.CASCADE, related_name="jira_links"
    )
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    base_url = models.CharField(max_length=2048)
    project_key = models.CharField(max_length=64)
    key = models.CharField(max_length=64)
    issue_id = models.CharField(max_length=64, blank=True)
    url = models.CharField(max_length=2048)
    api_url = models.CharField(max_length=2048, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["finding", "base_url", "project_key"], name="jiraissuelink_finding_project"
            ),
        ]
        indexes = [models.Index(fields=["team", "key"], name="jiraissuelink_team_key")]

    def __str__(self) -> str:
        return f"{self.key} for finding {self.finding_id}"
