"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task

from trustrank.cluster import services


@shared_task(acks_late=True, reject_on_worker_lost=True)
def replay_run(run_id: int) -> None:
    """Safe to deliver twice: the service claims the row only while it is queued."""
    services.replay_run_execute(run_id=run_id)
