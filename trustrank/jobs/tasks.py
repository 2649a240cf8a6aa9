"""The job system's two Celery tasks: run one job, and sweep."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True)
def jobs_run(kind: str, job_id: str) -> str:
    """Run one job by kind and id; a batch wake-up (empty kind) runs the fairest batch job.
    Safe to deliver twice: the row's claim decides who runs it."""
    from trustrank.jobs.runner import job_run

    return job_run(kind_name=kind, job_id=job_id)


@shared_task(acks_late=True)
def jobs_sweep() -> dict[str, int]:
    from trustrank.jobs.sweep import jobs_sweep as sweep

    return sweep()
