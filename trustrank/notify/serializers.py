"""How webhooks and deliveries read in the API. The secret is never among the fields."""

from __future__ import annotations

from typing import Any

from trustrank.notify.models import Delivery, DeliveryStatus, Webhook


def webhook_data(webhook: Webhook) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": webhook.pk,
        "team": webhook.team_id,
        "url": webhook.url,
        "events": list(webhook.events),
        "format": webhook.format,
        "enabled": webhook.enabled,
        "has_secret": bool(webhook.secret),
        "created_at": webhook.created_at.isoformat(),
        "updated_at": webhook.updated_at.isoformat(),
    }
    if webhook.format == "jira":
        data["jira_project_key"] = webhook.jira_project_key
        data["jira_user"] = webhook.jira_user
    return data


def delivery_data(delivery: Delivery) -> dict[str, Any]:
    retrying = delivery.status == DeliveryStatus.RETRYING
    return {
        "id": str(delivery.uuid),
        "webhook": delivery.webhook_id,
        "event": delivery.event,
        "status": delivery.status,
        "response_code": delivery.response_code,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at.isoformat()
        if delivery.next_attempt_at and delivery.status != DeliveryStatus.DELIVERED
        and delivery.status != DeliveryStatus.FAILED else None,
        "next_retry_at": delivery.next_attempt_at.isoformat()
        if retrying and delivery.next_attempt_at else None,
        "error": delivery.error,
        "created_at": delivery.created_at.isoformat(),
        "last_attempt_at": delivery.last_attempt_at.isoformat()
        if delivery.last_attempt_at else None,
        "delivered_at": delivery.delivered_at.isoformat() if delivery.delivered_at else None,
    }
