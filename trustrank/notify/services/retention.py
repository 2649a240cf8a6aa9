"""Old deliveries go: finished ones past TRUSTRANK_WEBHOOK_RETENTION_DAYS, then the events
and batches nothing refers to any more. Open deliveries (and what they need) are kept."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from trustrank.jobs.models import FINISHED
from trustrank.notify.models import Delivery, DeliveryStatus, NotifyBatch, NotifyEvent


def notify_retention_apply() -> dict[str, int]:
    cutoff = timezone.now() - timedelta(days=settings.TRUSTRANK_WEBHOOK_RETENTION_DAYS)
    deliveries, _ = Delivery.objects.filter(
        status__in=(DeliveryStatus.DELIVERED, DeliveryStatus.FAILED), created_at__lt=cutoff
    ).delete()
    events, _ = NotifyEvent.objects.filter(occurred_at__lt=cutoff).exclude(
        Exists(Delivery.objects.filter(notify_event=OuterRef("pk")))
    ).delete()
    batches, _ = NotifyBatch.objects.filter(status__in=FINISHED, created_at__lt=cutoff).exclude(
        Exists(NotifyEvent.objects.filter(batch=OuterRef("pk")))
    ).exclude(Exists(Delivery.objects.filter(round=OuterRef("pk")))).delete()
    return {"deliveries": deliveries, "events": events, "batches": batches}
