"""Jira: a team's settings, and the issue a finding event opens there.

`jira_deliver` is what the notification webhooks' delivery worker calls for a webhook of
format "jira": it opens one Jira issue per finding and Jira project (REST API v2), links the
finding to it, and records that on the finding's audit trail. A later event about the same
finding comments on that issue instead of opening another.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson
from django.db import transaction

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.jira.issues import comment_body, finding_of, issue_fields
from trustrank.jira.models import JiraConfig, JiraIssueLink
from trustrank.lib.locks import advisory_xact_lock
from trustrank.lib.outbound import OutboundRefused, outbound_request, outbound_url_check
from trustrank.risk.inputs import DECISIONS

# Namespace of the (int, int) advisory lock held while a finding's issue is looked up and
# made; the second key is the finding id.
JIRA_ISSUE_LOCK = 0x4A495241  # "JIRA"

# Events that comment on a finding's existing issue (a repeated finding.immediate does not:
# the issue already says so).
COMMENT_EVENTS = frozenset({"finding.decision_changed", "feed.kev_added"})

# Jira project keys: an upper-case letter, then upper-case letters, digits or underscores.
PROJECT_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
NOT_A_FINDING_EVENT = "not a finding event; nothing sent"
# How much of Jira's answer a failed delivery keeps in its detail.
DETAIL_MAX = 500


class JiraConfigError(ValueError):
    """A Jira setting that cannot work; `field` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class JiraForbidden(PermissionError):
    pass


# --- settings -------------------------------------------------------------------------------


def jira_config_get(*, team_id: int) -> JiraConfig | None:
    return JiraConfig.objects.filter(team_id=team_id).first()


def _clean_base_url(value: Any) -> str:
    url = str(value or "").strip().rstrip("/")
    if not url:
        raise JiraConfigError("the Jira base URL is required", field="base_url")
    if len(url) > 2048:
        raise JiraConfigError("at most 2048 characters", field="base_url")
    if "?" in url or "#" in url:
        raise JiraConfigError("the base URL takes no query or fragment", field="base_url")
    try:
        outbound_url_check(url)
    except OutboundRefused as exc:
        raise JiraConfigError(str(exc), field="base_url") from exc
    return url


def _clean_text(value: Any, *, field: str, max_length: int, required: bool) -> str:
    if value is not None and not isinstance(value, str):
        raise JiraConfigError("a string", field=field)
    text = (value or "").strip()
    if required and not text:
        raise JiraConfigError("required", field=field)
    if len(text) > max_length:
        raise JiraConfigError(f"at most {max_length} characters", field=field)
    return text


def _clean_priorities(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise JiraConfigError(
            'an object of SSVC decision to Jira priority name, e.g. {"immediate": "Highest"}',
            field="priorities",
        )
    cleaned: dict[str, str] = {}
    for decision, name in value.items():
        if decision not in DECISIONS:
            raise JiraConfigError(
                f"{decision!r} is not a decision (one of {', '.join(DECISIONS)})",
                field="priorities",
            )
        if name is None or name == "":
            continue
        if not isinstance(name, str) or len(name.strip()) > 64:
            raise JiraConfigError(
                f"the priority for {decision!r} is a Jira priority name", field="priorities"
            )
        cleaned[decision] = name.strip()
    return cleaned


def jira_config_set(*, principal: Principal, team_id: int, values: dict[str, Any]) -> JiraConfig:
    """Create or change the team's Jira settings (the fields given; the token is kept when
    none is given). Team admins only. Everything is checked before anything is stored."""
    if not principal.can(Scope.ADMIN, team_id):
        raise JiraForbidden("changing the Jira settings needs the 'admin' scope in this team")
    current = jira_config_get(team_id=team_id)
    config = current or JiraConfig(team_id=team_id)
    creating = current is None
    if "base_url" in values or creating:
        config.base_url = _clean_base_url(values.get("base_url"))
    if "project_key" in values or creating:
        key = _clean_text(values.get("project_key"), field="project_key", max_length=64,
                          required=True)
        if not PROJECT_KEY.match(key):
            raise JiraConfigError(
                "a Jira project key: upper-case letters, digits and _, starting with a letter",
                field="project_key",
            )
        config.project_key = key
    if "issue_type" in values:
        config.issue_type = _clean_text(
            values["issue_type"], field="issue_type", max_length=64, required=False
        ) or "Bug"
    if "user" in values:
        config.user = _clean_text(values["user"], field="user", max_length=254, required=False)
    if values.get("token") not in (None, ""):
        config.token = _clean_text(values["token"], field="token", max_length=4096,
                                   required=True)
    if creating and not config.token:
        raise JiraConfigError("required: the Jira API token or personal access token",
                              field="token")
    if "priorities" in values:
        config.priorities = _clean_priorities(values["priorities"])
    config.updated_by = principal.label[:160]
    with transaction.atomic():
        config.save()
        audit_event_record(
            actor=Actor.of(principal),
            action="jira_config_set",
            team_id=team_id,
            subject_type="jira_config",
            subject_id=str(team_id),
            after=jira_config_public(config),
            reason="Jira settings created" if creating else "Jira settings changed",
        )
    return config


def jira_config_delete(*, principal: Principal, team_id: int) -> bool:
    if not principal.can(Scope.ADMIN, team_id):
        raise JiraForbidden("removing the Jira settings needs the 'admin' scope in this team")
    with transaction.atomic():
        deleted, _ = JiraConfig.objects.filter(team_id=team_id).delete()
        if deleted:
            audit_event_record(
                actor=Actor.of(principal), action="jira_config_deleted", team_id=team_id,
                subject_type="jira_config", subject_id=str(team_id),
                reason="Jira settings removed",
            )
    return bool(deleted)


def jira_config_public(config: JiraConfig | None) -> dict[str, Any]:
    """The settings as pages and the API show them: never the token, only whether it is set."""
    if config is None:
        return {"configured": False, "base_url": "", "project_key": "", "issue_type": "Bug",
                "user": "", "auth": None, "token_set": False, "priorities": {}}
    return {
        "configured": True,
        "base_url": config.base_url,
        "project_key": config.project_key,
        "issue_type": config.issue_type,
        "user": config.user,
        "auth": "basic" if config.user else "bearer",
        "token_set": bool(config.token),
        "priorities": dict(config.priorities or {}),
    }


# --- delivery -------------------------------------------------------------------------------


def jira_auth_header(*, user: str, token: str) -> str:
    """Jira Cloud: Basic base64(email:API token). Data Center / Server: Bearer <PAT>."""
    if user:
        return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode("ascii")
    return f"Bearer {token}"


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
        "base_url": base_url.rstrip("/"),
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
    raise `trustrank.lib.outbound.OutboundError` (the caller retries those)."""
    finding_data = finding_of(payload)
    if finding_data is None:
        return 204, NOT_A_FINDING_EVENT
    finding = Finding.objects.filter(pk=finding_data["id"], team_id=webhook.team_id).first()
    if finding is None:
        return 404, f"finding {finding_data['id']} is not one of the team's; nothing sent"
    setup, problem = _delivery_settings(webhook)
    if problem:
        return 400, f"{problem}; nothing sent"
    actor = Actor.system(f"jira webhook {getattr(webhook, 'pk', '') or ''}".strip())
    # The lock makes "look for the issue, else open one" one step per finding: two workers
    # delivering two events about the same finding at once must not open two issues. It is
    # held across Jira's answer (a 10 s timeout at most), which only delays the other one.
    with transaction.atomic():
        advisory_xact_lock(JIRA_ISSUE_LOCK, finding.pk)
        link = JiraIssueLink.objects.filter(
            finding=finding, base_url=setup["base_url"], project_key=setup["project_key"]
        ).first()
        if link is not None:
            return _comment(link=link, finding=finding, setup=setup, event=event,
                            finding_data=finding_data, actor=actor)
        return _create(finding=finding, setup=setup, event=event, finding_data=finding_data,
                       actor=actor)


def _create(*, finding: Finding, setup: dict[str, Any], event: str,
            finding_data: dict[str, Any], actor: Actor) -> tuple[int, str]:
    fields = issue_fields(
        event=event, finding=finding_data, project_key=setup["project_key"],
        issue_type=setup["issue_type"], priorities=setup["priorities"],
    )
    status, data, raw = _jira_call(
        f"{setup['base_url']}/rest/api/2/issue", auth=setup["auth"], body={"fields": fields}
    )
    if not 200 <= status < 300:
        return status, _jira_errors(status, data, raw)[:DETAIL_MAX]
    key = data.get("key") if isinstance(data, dict) else None
    if not isinstance(key, str) or not key:
        # Created or not, nothing tells which issue: a retry may open a second one, which
        # is better than losing the event. Jira's 201 always carries the key.
        return 502, "Jira answered without an issue key"
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
    return status, detail


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
