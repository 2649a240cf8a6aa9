"""A team's Jira settings: where its findings' issues go and how TrustRank signs in there.
Checked whole before anything is stored; the token is write-only."""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor, audit_event_record
from trustrank.jira.models import JiraConfig
from trustrank.lib.outbound import OutboundRefused, outbound_url_check
from trustrank.risk.inputs import DECISIONS

# Jira project keys: an upper-case letter, then upper-case letters, digits or underscores.
PROJECT_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class JiraConfigError(ValueError):
    """A Jira setting that cannot work; `field` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class JiraForbidden(PermissionError):
    pass


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
    for given, name in value.items():
        # "out_of_cycle" (as the triage policy's field names spell it) means "out-of-cycle".
        decision = str(given).strip().lower().replace("_", "-")
        if decision not in DECISIONS:
            raise JiraConfigError(
                f"{given!r} is not a decision (one of {', '.join(DECISIONS)})",
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
