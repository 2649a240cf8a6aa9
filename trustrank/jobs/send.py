"""Sending jobs' messages: to `ingest_high`, `ingest` or `batch`, after the row commits."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from trustrank.jobs.models import JobClass


def queue_for(*, job_class: str, priority: int) -> str:
    if job_class == JobClass.BATCH:
        return settings.BATCH_QUEUE
    if priority < settings.TRUSTRANK_DEFAULT_PRIORITY:
        return settings.INGEST_HIGH_QUEUE
    return settings.INGEST_QUEUE


def job_send(
    *, kind: str, job_id: Any, job_class: str, priority: int, countdown: float = 0
) -> None:
    """Send the job's message now (use `job_enqueue_on_commit` from a transaction)."""
    from trustrank.jobs.tasks import jobs_run

    options: dict[str, Any] = {"queue": queue_for(job_class=job_class, priority=priority)}
    if countdown > 0:
        options["countdown"] = countdown
    jobs_run.apply_async(args=[kind, str(job_id)], **options)


def job_enqueue_on_commit(job: Any, *, countdown: float = 0) -> None:
    """Send the job's message once the row is committed, never before."""
    from trustrank.jobs.registry import job_kind_of

    kind = job_kind_of(type(job)).name
    job_id, job_class, priority = job.pk, job.job_class, job.priority
    transaction.on_commit(
        lambda: job_send(
            kind=kind, job_id=job_id, job_class=job_class, priority=priority, countdown=countdown
        )
    )


def batch_wake(count: int = 1) -> None:
    """Send wake-ups to the batch queue (after a slot freed, or from the sweep)."""
    from trustrank.jobs.tasks import jobs_run

    for _ in range(count):
        jobs_run.apply_async(args=["", ""], queue=settings.BATCH_QUEUE)
