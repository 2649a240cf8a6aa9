"""Thin Celery tasks: ids in, services do the work."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import OperationalError

from trustrank.lib.tasks import IngestQueueTask

_MATCH_OPTIONS: dict[str, Any] = {
    "base": IngestQueueTask,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}


def _match(project_version_id: int) -> dict[str, int]:
    from trustrank.vulns.services.matching import sbom_findings_match

    return sbom_findings_match(project_version_id=int(project_version_id))


@shared_task(**_MATCH_OPTIONS)
def vulns_findings_match(project_version_id: int) -> dict[str, int]:
    """Match one project version's current SBOM against the advisories. An SBOM load's job
    now matches in its own transaction; this runs messages queued before it did."""
    return _match(project_version_id)


@shared_task(name="trustrank.vulns.tasks.findings_match_project_version", **_MATCH_OPTIONS)
def findings_match_project_version(project_version_id: int) -> dict[str, int]:
    """The task's name before `vulns_findings_match`: messages already queued under it
    still run. Nothing sends it any more; remove it once no queue holds it."""
    return _match(project_version_id)
