"""Thin Celery tasks of the findings app: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from trustrank.lib.tasks import IngestQueueTask


@shared_task(
    base=IngestQueueTask,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def findings_bulk_triage(job_id: int) -> str:
    """Apply one BulkTriageJob; a second delivery continues from the job's cursor."""
    from trustrank.findings.services.bulk import bulk_triage_job_run

    return bulk_triage_job_run(job_id=int(job_id))
