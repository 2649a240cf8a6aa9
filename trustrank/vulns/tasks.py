"""Thin Celery tasks: ids in, services do the work."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from trustrank.lib.queues import IngestQueueTask


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
    from trustrank.inventory.models import ProjectVersion
    from trustrank.ranking.services import ranking_after_load
    from trustrank.vulns.services.findings import findings_match_project_version as match

    counts = match(project_version_id=int(project_version_id))
    team_id = (
        ProjectVersion.objects.filter(pk=project_version_id)
        .values_list("project__team_id", flat=True)
        .first()
    )
    if team_id is not None:
        ranking_after_load(team_id=team_id, what=f"SBOM of project version {project_version_id}")
    return counts


@shared_task(base=IngestQueueTask, acks_late=True)
def feeds_import_scheduled(kind: str) -> str | None:
    """Beat: fetch a configured feed source and queue its import job."""
    from trustrank.vulns.services.feeds import feed_scheduled_import

    job = feed_scheduled_import(kind=kind)
    return str(job.pk) if job is not None else None
