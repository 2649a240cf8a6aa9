"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings

from trustrank.cluster import services
from trustrank.lib.tasks import IngestQueueTask


@shared_task(
    bind=True, base=IngestQueueTask, acks_late=True, reject_on_worker_lost=True, max_retries=24
)
def replay_run(self: Task, run_id: int) -> str:
    """Safe to deliver twice: the service claims the row only while it is queued or its
    lease has lapsed. A message redelivered after a worker died finds the dead worker's
    lease still live, so it comes back once the lease can have run out."""
    outcome = services.replay_run_execute(run_id=run_id)
    if outcome == services.Outcome.BUSY:
        raise self.retry(countdown=settings.TRUSTRANK_JOB_LEASE_SECONDS)
    return outcome.value


@shared_task(acks_late=True, reject_on_worker_lost=True)
def cluster_diagnose_task(cluster_id: int, requested: str) -> dict[str, int] | None:
    """Debounced diagnosis after a load; a second delivery finds the run done and skips."""
    from datetime import datetime

    from trustrank.cluster.services.diagnoses import cluster_diagnose_if_due

    result = cluster_diagnose_if_due(
        cluster_id=cluster_id, requested=datetime.fromisoformat(requested)
    )
    return None if result is None else result.as_dict()


@shared_task(acks_late=True)
def clusters_diagnose() -> int:
    from trustrank.cluster.services.diagnoses import clusters_diagnose_all

    return clusters_diagnose_all()


@shared_task(acks_late=True)
def cluster_metrics_retention() -> list[str]:
    """Drop the day partitions past retention, then fold each finished day's partial
    minute rows into one row per minute; returns the names of the dropped partitions."""
    from trustrank.cluster.services.metrics import (
        metrics_minutes_compact_due,
        metrics_retention_apply,
    )

    dropped = metrics_retention_apply()
    metrics_minutes_compact_due()
    return dropped
