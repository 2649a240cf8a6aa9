"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from ingest import services
from ingest.errors import IngestTransient


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(IngestTransient, OperationalError),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
)
def ingest_job_run(job_id: str) -> None:
    services.job_run(job_id=job_id)


@shared_task(acks_late=True)
def ingest_jobs_sweep() -> dict[str, int]:
    return services.jobs_sweep()
