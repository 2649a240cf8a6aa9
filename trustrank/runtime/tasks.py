"""Thin Celery tasks for runtime evidence."""

from __future__ import annotations

from celery import shared_task

from trustrank.runtime import services


@shared_task(acks_late=True)
def runtime_traces_sweep() -> dict[str, int]:
    return services.traces_sweep()
