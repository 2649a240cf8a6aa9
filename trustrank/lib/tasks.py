"""Celery helpers shared by the apps' tasks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db import OperationalError


class IngestQueueTask(Task):  # type: ignore[misc]
    """Route to the ingest queue as configured when the message is sent, not at import time
    (queue names carry a per-deployment prefix)."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        options.setdefault("queue", settings.INGEST_QUEUE)
        return super().apply_async(args, kwargs, **options)


def row_task(func: Callable[..., Any]) -> Any:
    """A task that works off one row (a run, a job, an export) by id: on the ingest queue,
    acknowledged after it ran (a killed worker's message comes back; the row's claim makes the
    second delivery harmless), retried with back-off while the database is unreachable."""
    return shared_task(
        base=IngestQueueTask,
        acks_late=True,
        reject_on_worker_lost=True,
        autoretry_for=(OperationalError,),
        retry_backoff=True,
        max_retries=5,
    )(func)
