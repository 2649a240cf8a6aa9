"""Reading webhooks and their deliveries: only those of teams the principal administers."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.notify.models import Delivery, Webhook

ADMIN = "admin"


def webhook_list(*, principal: Principal) -> QuerySet[Webhook]:
    return Webhook.objects.filter(team_id__in=principal.teams_with(ADMIN)).select_related("team")


def webhook_get_for_principal(*, principal: Principal, webhook_id: int) -> Webhook:
    """The webhook, or 404 (another team's is as unknown as a missing one)."""
    webhook = webhook_list(principal=principal).filter(pk=webhook_id).first()
    if webhook is None:
        raise Http404(f"no webhook {webhook_id}")
    return webhook


def delivery_list(*, webhook: Webhook) -> QuerySet[Delivery]:
    """Newest first."""
    return Delivery.objects.filter(webhook=webhook).order_by("-created_at", "-id")
