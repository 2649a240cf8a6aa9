from __future__ import annotations

import uuid

from django.db.models import BooleanField, Case, Q, QuerySet, Value, When
from django.http import Http404

from ingest.models import IngestJob, JobKind
from trustrank.accounts.principal import Principal

# Advisory feeds are shared reference data: every signed-in principal may see how and when
# they were last imported, whichever team started the import.
FEED_KINDS = (JobKind.OSV, JobKind.KEV, JobKind.EPSS, JobKind.NVD)


def job_list(*, principal: Principal) -> QuerySet[IngestJob]:
    """The principal's teams' jobs and every feed import. `is_foreign` marks another team's
    feed import: pages and the API show what ran and how it went, never who ran it."""
    if not principal.team_ids:
        return IngestJob.objects.none()
    return (
        IngestJob.objects.filter(Q(team_id__in=principal.team_ids) | Q(kind__in=FEED_KINDS))
        .annotate(
            is_foreign=Case(
                When(team_id__in=principal.team_ids, then=Value(False)),
                default=Value(True),
                output_field=BooleanField(),
            )
        )
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
