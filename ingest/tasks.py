"""Thin Celery tasks: ids in, the service does the work."""

from __future__ import annotations

from celery import shared_task

from ingest import services
from trustrank.lib.tasks import IngestQueueTask


@shared_task(acks_late=True, reject_on_worker_lost=True)
def ingest_job_run(job_id: str) -> str:
    """The name ingest jobs were sent under before the one job system: messages queued
    under it still run (through the job runner)."""
    return services.job_run(job_id=job_id)


@shared_task(acks_late=True)
def ingest_jobs_sweep() -> dict[str, int]:
    """The sweep's name before the one job system (beat entries of an old schedule file)."""
    from trustrank.jobs.sweep import jobs_sweep

    return jobs_sweep()


def _feed_import_scheduled(kind: str) -> str | None:
    from ingest.submit import feed_scheduled_submit

    job = feed_scheduled_submit(kind=kind)
    return str(job.pk) if job is not None else None


@shared_task(base=IngestQueueTask, acks_late=True)
def ingest_feed_import_scheduled(kind: str) -> str | None:
    """Beat: fetch a configured feed source and queue its import job."""
    return _feed_import_scheduled(kind)


@shared_task(name="trustrank.vulns.tasks.feeds_import_scheduled", base=IngestQueueTask,
             acks_late=True)
def feeds_import_scheduled(kind: str) -> str | None:
    """The task's name when it lived in trustrank/vulns/tasks.py: beat messages already
    queued under it still run. Remove it once no queue holds it."""
    return _feed_import_scheduled(kind)
