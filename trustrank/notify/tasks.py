"""Thin Celery task: the retention of old deliveries (beat)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True)
def notify_retention() -> dict[str, int]:
    from trustrank.notify.services.retention import notify_retention_apply

    return notify_retention_apply()
