"""Webhook configuration: add, change, remove, checked whole before anything is stored."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.lib.outbound import OutboundRefused, outbound_url_check
from trustrank.notify.events import notify_ping
from trustrank.notify.models import NotifyEventName, Webhook, WebhookFormat

ADMIN = "admin"
FIELDS = ("url", "events", "secret", "format", "enabled", "jira_project_key", "jira_user")
JIRA_FIELDS = ("jira_project_key", "jira_user")
# Only when creating: for a person who administers several teams.
CREATE_FIELDS = (*FIELDS, "team")


class WebhookInvalid(ValueError):
    """Bad input; `param` names the field(s)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


def _text(data: dict[str, Any], name: str, *, max_length: int, required: bool) -> str:
    value = data.get(name)
    if not isinstance(value, str) or (required and not value.strip()):
        raise WebhookInvalid(name, "must be a non-empty string" if required else "must be a string")
    if len(value) > max_length:
        raise WebhookInvalid(name, f"must be at most {max_length} characters")
    return value


def _events(value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise WebhookInvalid("events", "must be a non-empty list of event names")
    if not all(isinstance(v, str) for v in value):
        raise WebhookInvalid("events", "must be a list of strings")
    unknown = [v for v in value if v not in NotifyEventName.values]
    if unknown:
        raise WebhookInvalid(
            "events", f"unknown event(s): {', '.join(unknown)}; known events: "
            + ", ".join(NotifyEventName.values),
        )
    return list(dict.fromkeys(value))


def webhook_clean(
    data: Any, *, current: Webhook | None, allowed: tuple[str, ...] = FIELDS
) -> dict[str, Any]:
    """The fields to store, from a request body (all required fields when `current` is None,
    any subset for a change). WebhookInvalid naming the first field that is wrong."""
    if not isinstance(data, dict):
        raise WebhookInvalid("body", "must be a JSON object")
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        raise WebhookInvalid(",".join(unknown), f"unknown field(s): {', '.join(unknown)}")
    if current is None:
        missing = [k for k in ("url", "events", "secret") if k not in data]
        if missing:
            raise WebhookInvalid(",".join(missing), f"required field(s): {', '.join(missing)}")
    clean: dict[str, Any] = {}
    if "url" in data:
        url = _text(data, "url", max_length=2048, required=True).strip()
        try:
            outbound_url_check(url)
        except OutboundRefused as exc:
            raise WebhookInvalid("url", str(exc)) from None
        clean["url"] = url
    if "events" in data:
        clean["events"] = _events(data["events"])
    if "secret" in data:
        clean["secret"] = _text(data, "secret", max_length=1024, required=True)
    if "format" in data:
        fmt = data["format"]
        if fmt not in WebhookFormat.values:
            raise WebhookInvalid(
                "format", f"unknown format {fmt!r}; one of {', '.join(WebhookFormat.values)}"
            )
        clean["format"] = fmt
    if "enabled" in data:
        if not isinstance(data["enabled"], bool):
            raise WebhookInvalid("enabled", "must be true or false")
        clean["enabled"] = data["enabled"]
    fmt = clean.get("format", current.format if current else WebhookFormat.JSON)
    for name in JIRA_FIELDS:
        if name in data:
            if fmt != WebhookFormat.JIRA and data[name]:
                raise WebhookInvalid(name, "is only for format jira")
            clean[name] = _text(data, name, max_length=255 if name == "jira_user" else 64,
                                required=False).strip()
    return clean


def webhook_team_for(*, principal: Principal, data: Any) -> int:
    """The team a new webhook belongs to: the one the caller administers, or `team`."""
    teams = principal.teams_with(ADMIN)
    wanted = data.get("team") if isinstance(data, dict) else None
    if wanted is None:
        if len(teams) != 1:
            raise WebhookInvalid("team", "you administer several teams: name one")
        return teams[0]
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted not in teams:
        raise WebhookInvalid("team", "must be the id of a team you administer")
    return wanted


@transaction.atomic
def webhook_create(*, principal: Principal, data: Any) -> Webhook:
    clean = webhook_clean(data, current=None, allowed=CREATE_FIELDS)
    team_id = webhook_team_for(principal=principal, data=data)
    return Webhook.objects.create(team_id=team_id, created_by_label=principal.label[:160],
                                  **clean)


@transaction.atomic
def webhook_update(*, webhook: Webhook, data: Any) -> Webhook:
    clean = webhook_clean(data, current=webhook)
    if clean.get("format", webhook.format) != WebhookFormat.JIRA:
        # Leaving format jira: its fields no longer mean anything.
        clean.setdefault("jira_project_key", "")
        clean.setdefault("jira_user", "")
    for name, value in clean.items():
        setattr(webhook, name, value)
    webhook.updated_at = timezone.now()
    webhook.save()
    return webhook


def webhook_delete(*, webhook: Webhook) -> None:
    webhook.delete()


def webhook_ping(*, webhook: Webhook) -> None:
    """Send a `ping` to this webhook (through the worker, as every delivery)."""
    with transaction.atomic():
        notify_ping(webhook=webhook)
