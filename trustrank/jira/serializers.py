"""API shapes of a team's Jira settings (the token is write-only)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class JiraConfigSerializer(serializers.Serializer[Any]):
    """`PUT /api/v1/jira` takes these (all but `base_url` and `project_key`, and `token` on
    the first PUT, may be left out: what is not given stays as it is); `GET` answers them
    without the token, with `token_set`, `auth` and `configured`."""

    team = serializers.IntegerField(read_only=True)
    configured = serializers.BooleanField(read_only=True)
    base_url = serializers.CharField(help_text="e.g. https://example.atlassian.net")
    project_key = serializers.CharField(help_text="e.g. SEC")
    issue_type = serializers.CharField(required=False, default="Bug")
    user = serializers.CharField(
        required=False, allow_blank=True,
        help_text="Jira Cloud: the account's email (basic auth with the API token). "
        "Blank: the token is a Data Center / Server personal access token (Bearer).",
    )
    token = serializers.CharField(write_only=True, required=False)
    token_set = serializers.BooleanField(read_only=True)
    auth = serializers.ChoiceField(choices=["basic", "bearer"], read_only=True, allow_null=True)
    priorities = serializers.DictField(
        child=serializers.CharField(), required=False,
        help_text='SSVC decision to Jira priority name, e.g. {"immediate": "Highest"}',
    )


def jira_link_data(finding: Any) -> dict[str, str] | None:
    """A finding's Jira issue as {key, url} (its first, if several Jira projects have one),
    from the links prefetched with the finding (`jira_links`)."""
    links = list(finding.jira_links.all())
    if not links:
        return None
    link = min(links, key=lambda item: (item.created_at, item.pk))
    return {"key": link.key, "url": link.url}
