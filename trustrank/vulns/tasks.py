"""Thin Celery tasks: ids in, services do the work."""

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
def findings_match_project_version(project_version_id: int) -> dict[str, int]:
    """Match one project version's current SBOM against the advisories (after an SBOM load)."""
    from trustrank.vulns.services.findings import findings_match_project_version as match

    return match(project_version_id=int(project_version_id))
