"""Thin Celery tasks of the findings app: ids in, the service does the work."""

from __future__ import annotations

from trustrank.lib.tasks import row_task


@row_task
def findings_bulk_triage(job_id: int) -> str:
    """Apply one BulkTriageJob; a second delivery continues from the job's cursor."""
    from trustrank.findings.services.bulk import bulk_triage_job_run

    return bulk_triage_job_run(job_id=int(job_id))
