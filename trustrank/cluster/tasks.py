"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings

from trustrank.cluster import services


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=24)
def replay_run(self: Task, run_id: int) -> str:
    """Safe to deliver twice: the service claims the row only while it is queued or its
    lease has lapsed. A message redelivered after a worker died finds the dead worker's
    lease still live, so it comes back once the lease can have run out."""
    outcome = services.replay_run_execute(run_id=run_id)
    if outcome == services.Outcome.BUSY:
        raise self.retry(countdown=settings.TRUSTRANK_JOB_LEASE_SECONDS)
    return outcome.value
