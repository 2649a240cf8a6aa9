"""The Jira issue a finding event opens, and the finding's link to it.

`jira_deliver` is what the notification webhooks' delivery worker calls for a webhook of
format "jira": it opens one Jira issue per finding and Jira project (REST API v2), links the
finding to it, and records that on the finding's audit trail. A later event about the same
finding comments on that issue instead of opening another.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from django.db import transaction

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.jira.issues import comment_body, finding_of, issue_fields
from trustrank.jira.models import JiraConfig, JiraIssueLink
from trustrank.jira.services.config import JiraForbidden, jira_config_get
from trustrank.lib.locks import advisory_xact_lock
from trustrank.lib.numbers import int_or_none
from trustrank.lib.outbound import outbound_request

# Namespace of the (int, int) advisory lock held while a finding's issue is looked up and
# made; the second key is the finding id.
JIRA_ISSUE_LOCK = 0x4A495241  # "JIRA"

# Events that comment on a finding's existing issue (a repeated finding.immediate does not:
# the issue already says so).
COMMENT_EVENTS = frozenset({"finding.decision_changed", "feed.kev_added"})

NOT_A_FINDING_EVENT = "not a finding event; nothing sent"
# How much of Jira's answer a failed delivery keeps in its detail.
DETAIL_MAX = 500


def jira_auth_header(*, user: str, token: str) -> str:
    """Jira Cloud: Basic base64(email:API token). Data Center / Server: Bearer <PAT>."""
    if user:
        return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode("ascii")
    return f"Bearer {token}"


def jira_base_url(url: str) -> str:
    """The Jira site of a URL someone may have copied from further in: a webhook's `url` of
    `https://x.atlassian.net/rest/api/2/issue` or `…/browse/SEC-1` means the site."""
    url = url.strip().rstrip("/")
    for marker in ("/rest/api/", "/browse/"):
        if marker in url:
            url = url[: url.index(marker)]
    return url.rstrip("/")


def jira_issue_page(*, base_url: str, key: str) -> str:
    return f"{base_url.rstrip('/')}/browse/{key}"


def _jira_call(url: str, *, auth: str, body: dict[str, Any]) -> tuple[int, Any, bytes]:
    response = outbound_request(
        "POST",
        url,
        body=orjson.dumps(body),
        headers={
            "Authorization": auth,
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "TrustRank",
        },
    )
    try:
        data = orjson.loads(response.body) if response.body else None
    except orjson.JSONDecodeError:
        data = None
    return response.status, data, response.body


def _jira_errors(status: int, data: Any, raw: bytes) -> str:
    """Jira's own words for a refusal: `errorMessages` and the field `errors`."""
    parts: list[str] = []
    if isinstance(data, dict):
        parts += [str(m) for m in data.get("errorMessages") or []]
        errors = data.get("errors")
        if isinstance(errors, dict):
            parts += [f"{k}: {v}" for k, v in errors.items()]
    text = "; ".join(parts) or raw[:DETAIL_MAX].decode("utf-8", "replace").strip()
    return f"Jira answered {status}" + (f": {text}" if text else "")


def _delivery_settings(webhook: Any) -> tuple[dict[str, Any], str | None]:
    """What a delivery uses: the webhook's own fields, each empty one filled from the team's
    Jira settings. Returns (settings, None) or ({}, why it cannot be sent)."""
    config = jira_config_get(team_id=webhook.team_id)
    base_url = (getattr(webhook, "url", "") or (config.base_url if config else "")).strip()
    project_key = getattr(webhook, "jira_project_key", "") or (
        config.project_key if config else ""
    )
    token = getattr(webhook, "secret", "") or (config.token if config else "")
    user = getattr(webhook, "jira_user", "") or (config.user if config else "")
    if not base_url:
        return {}, "no Jira base URL: set the webhook's url or the team's Jira settings"
    if not project_key:
        return {}, ("no Jira project key: set the webhook's jira_project_key or the team's "
                    "Jira settings")
    if not token:
        return {}, "no Jira token: set the webhook's secret or the team's Jira settings"
    return {
        "base_url": jira_base_url(base_url),
        "project_key": project_key,
        "auth": jira_auth_header(user=user, token=token),
        "issue_type": (config.issue_type if config else "") or "Bug",
        "priorities": dict(config.priorities or {}) if config else {},
    }, None


def jira_deliver(*, webhook: Any, event: str, payload: dict[str, Any]) -> tuple[int, str]:
    """Open the Jira issue for the finding an event is about (or comment on the one opened
    before), and link the finding to it.

    `webhook` has `team_id`, `url` (the Jira base URL), `secret` (the token),
    `jira_project_key` and `jira_user` (either may be empty: the team's Jira settings fill
    them in). Returns (HTTP status, detail): Jira's status and words when it refuses, 204 for
    an event about no finding (job.failed, gate.failed: nothing is sent), 4xx without a call
    when the settings are incomplete or the finding is not the team's. Network failures
    raise `trustrank.lib.outbound.OutboundError` (the caller retries those); a URL outbound
    calls may not reach raises `OutboundRefused`, as for every other webhook format."""
    finding_data = finding_of(payload)
    if finding_data is None:
        return 204, NOT_A_FINDING_EVENT
    finding_id = int_or_none(finding_data["id"], minimum=1)
    finding = (
        Finding.objects.filter(pk=finding_id, team_id=webhook.team_id).first()
        if finding_id is not None else None
    )
    if finding is None:
        return 404, f"finding {finding_data['id']} is not one of the team's; nothing sent"
    setup, problem = _delivery_settings(webhook)
    if problem:
        return 400, f"{problem}; nothing sent"
    actor = Actor.system(f"jira webhook {getattr(webhook, 'pk', '') or ''}".strip())
    status, detail, _ = _issue_for(finding=finding, setup=setup, event=event,
                                   finding_data=finding_data, actor=actor)
    return status, detail


def _issue_for(*, finding: Finding, setup: dict[str, Any], event: str,
               finding_data: dict[str, Any], actor: Actor
               ) -> tuple[int, str, JiraIssueLink | None]:
    # The lock makes "look for the issue, else open one" one step per finding: two workers
    # delivering two events about the same finding at once must not open two issues. It is
    # held across Jira's answer (a 10 s timeout at most), which only delays the other one.
    with transaction.atomic():
        advisory_xact_lock(JIRA_ISSUE_LOCK, finding.pk)
        link = JiraIssueLink.objects.filter(
            finding=finding, base_url=setup["base_url"], project_key=setup["project_key"]
        ).first()
        if link is not None:
            status, detail = _comment(link=link, finding=finding, setup=setup, event=event,
                                      finding_data=finding_data, actor=actor)
            return status, detail, link
        return _create(finding=finding, setup=setup, event=event, finding_data=finding_data,
                       actor=actor)


def _create(*, finding: Finding, setup: dict[str, Any], event: str,
            finding_data: dict[str, Any], actor: Actor
            ) -> tuple[int, str, JiraIssueLink | None]:
    fields = issue_fields(
        event=event, finding=finding_data, project_key=setup["project_key"],
        issue_type=setup["issue_type"], priorities=setup["priorities"],
    )
    status, data, raw = _jira_call(
        f"{setup['base_url']}/rest/api/2/issue", auth=setup["auth"], body={"fields": fields}
    )
    if not 200 <= status < 300:
        return status, _jira_errors(status, data, raw)[:DETAIL_MAX], None
    key = data.get("key") if isinstance(data, dict) else None
    if not isinstance(key, str) or not key:
        # Created or not, nothing tells which issue: a retry may open a second one, which
        # is better than losing the event. Jira's 201 always carries the key.
        return 502, "Jira answered without an issue key", None
    link = JiraIssueLink.objects.create(
        finding=finding,
        team_id=finding.team_id,
        base_url=setup["base_url"],
        project_key=setup["project_key"],
        key=key[:64],
        issue_id=str(data.get("id") or "")[:64],
        url=jira_issue_page(base_url=setup["base_url"], key=key),
        api_url=str(data.get("self") or "")[:2048],
    )
    detail = f"jira issue {link.key} created"
    audit_event_record(
        actor=actor, action="jira_issue_created", team_id=finding.team_id,
        finding_id=finding.pk, environment=finding.environment,
        after={"jira_key": link.key, "jira_url": link.url, "event": event},
        reason=detail,
    )
    return status, detail, link


def _comment(*, link: JiraIssueLink, finding: Finding, setup: dict[str, Any], event: str,
             finding_data: dict[str, Any], actor: Actor) -> tuple[int, str]:
    if event not in COMMENT_EVENTS:
        return 200, f"finding already has jira issue {link.key}; nothing sent"
    status, data, raw = _jira_call(
        f"{setup['base_url']}/rest/api/2/issue/{link.key}/comment",
        auth=setup["auth"],
        body={"body": comment_body(event=event, finding=finding_data)},
    )
    if not 200 <= status < 300:
        return status, _jira_errors(status, data, raw)[:DETAIL_MAX]
    detail = f"jira issue {link.key} commented ({event})"
    audit_event_record(
        actor=actor, action="jira_issue_commented", team_id=finding.team_id,
        finding_id=finding.pk, environment=finding.environment,
        after={"jira_key": link.key, "event": event,
               "decision": str(finding_data.get("decision") or "")},
        reason=detail,
    )
    return status, detail


# --- opened by hand -------------------------------------------------------------------------


class JiraNotConfigured(LookupError):
    """The team has no Jira settings (or no token in them)."""


def finding_event_data(*, finding: Finding, url: str) -> dict[str, Any]:
    """A finding as the events' JSON carries it, for an issue opened by hand. Reads what
    `finding_get_for_principal` loads with it (project, version, service, rank)."""
    context = finding.rank_context
    data = context.data if context is not None else {}
    project, version, service = finding.project, finding.project_version, finding.service
    return {
        "id": finding.pk,
        "vuln_id": finding.vuln_id,
        "title": finding.display_title,
        "component": finding.component_name,
        "version": finding.component_version,
        "project": project.name if project is not None else "",
        "project_version": version.version if version is not None else "",
        "service": service.name if service is not None else "",
        "environment": finding.environment,
        "rank": finding.rank,
        "decision": finding.decision or None,
        "score": finding.score,
        "explanation": data.get("explanation", []) if isinstance(data, dict) else [],
        "url": url,
    }


def _config_settings(config: JiraConfig) -> dict[str, Any]:
    return {
        "base_url": config.base_url.rstrip("/"),
        "project_key": config.project_key,
        "auth": jira_auth_header(user=config.user, token=config.token),
        "issue_type": config.issue_type or "Bug",
        "priorities": dict(config.priorities or {}),
    }


def jira_issue_open(
    *, principal: Principal, finding: Finding, url: str
) -> tuple[int, str, JiraIssueLink | None]:
    """Open the finding's Jira issue with the team's Jira settings, as a person asked (the
    finding page's button, `POST /api/v1/findings/<id>/jira`). The same one issue per finding
    and project as the webhook: a finding that has one gets (200, …, that link). Returns
    Jira's status, a detail and the link (None when Jira refused)."""
    if not principal.can(Scope.TRIAGE, finding.team_id):
        raise JiraForbidden("opening a Jira issue needs the 'triage' scope in this team")
    config = jira_config_get(team_id=finding.team_id)
    if config is None or not config.token:
        raise JiraNotConfigured("the team has no Jira settings: an admin sets them first")
    return _issue_for(
        finding=finding, setup=_config_settings(config), event="manual",
        finding_data=finding_event_data(finding=finding, url=url), actor=Actor.of(principal),
    )
