"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task

from trustrank.cluster import services


@shared_task(acks_late=True, reject_on_worker_lost=True)
def replay_run(run_id: int) -> str:
    """The name replay runs were sent under before the one job system: messages queued
    under it still run (through the job runner)."""
    return services.replay_run_execute(run_id=int(run_id))


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
