"""Thin Celery tasks of the findings app: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True)
def findings_bulk_triage(job_id: int) -> str:
    """The name bulk triage jobs were sent under before the one job system: messages
    queued under it still run (through the job runner)."""
    from trustrank.findings.services.bulk import bulk_triage_job_run

    return bulk_triage_job_run(job_id=int(job_id))
