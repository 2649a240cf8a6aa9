from __future__ import annotations

import uuid

from django.db.models import QuerySet
from django.http import Http404

from ingest.models import IngestJob
from trustrank.accounts.principal import Principal


def job_list(*, principal: Principal) -> QuerySet[IngestJob]:
    return (
        IngestJob.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .order_by("-created_at")
    )


def job_get(*, principal: Principal, job_id: str | uuid.UUID) -> IngestJob:
    """The access helper for a job: 404 for malformed ids and for other teams' jobs."""
    try:
        key = uuid.UUID(str(job_id))
    except ValueError as exc:
        raise Http404("No such job.") from exc
    job = job_list(principal=principal).filter(pk=key).first()
    if job is None:
        raise Http404("No such job.")
    return job
