"""Shared by the identity tests: run queued jobs through the real handlers in-process."""

from __future__ import annotations

from ingest.models import IngestJob, JobStatus
from ingest.services import job_run


def run_queued_jobs() -> list[IngestJob]:
    """Run every queued job in this process, as a worker would (the end-to-end test uses a
    real worker; the others skip the broker to stay fast)."""
    jobs = list(IngestJob.objects.filter(status=JobStatus.QUEUED).order_by("created_at"))
    for job in jobs:
        job_run(job_id=str(job.pk))
    return [IngestJob.objects.get(pk=j.pk) for j in jobs]
