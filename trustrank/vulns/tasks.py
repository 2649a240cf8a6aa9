"""Thin Celery tasks: ids in, services do the work."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db import OperationalError


class IngestQueueTask(Task):  # type: ignore[misc]
    """Route to the ingest queue as configured when the message is sent, not at import time
    (queue names carry a per-deployment prefix)."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        options.setdefault("queue", settings.INGEST_QUEUE)
        return super().apply_async(args, kwargs, **options)


@shared_task(
    base=IngestQueueTask,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def findings_match_project_version(project_version_id: int) -> dict[str, int]:
    """Match one project version's current SBOM against the advisories (after an SBOM load)."""
    from trustrank.vulns.services.findings import findings_match_project_version as match

    return match(project_version_id=int(project_version_id))


@shared_task(base=IngestQueueTask, acks_late=True)
def feeds_import_scheduled(kind: str) -> str | None:
    """Beat: fetch a configured feed source and queue its import job."""
    from trustrank.vulns.services.feeds import feed_scheduled_import

    job = feed_scheduled_import(kind=kind)
    return str(job.pk) if job is not None else None
