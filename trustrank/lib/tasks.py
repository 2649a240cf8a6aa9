"""Celery helpers shared by the apps' tasks."""

from __future__ import annotations

from typing import Any

from celery import Task
from django.conf import settings


class IngestQueueTask(Task):  # type: ignore[misc]
    """Route to the ingest queue as configured when the message is sent, not at import time
    (queue names carry a per-deployment prefix)."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        options.setdefault("queue", settings.INGEST_QUEUE)
        return super().apply_async(args, kwargs, **options)
