from __future__ import annotations

import django_filters

from ingest.models import IngestJob, JobKind, JobStatus


class IngestJobFilterSet(django_filters.FilterSet):
    """Shared by the jobs page and GET /api/v1/jobs."""

    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    status = django_filters.ChoiceFilter(choices=JobStatus.choices)

    class Meta:
        model = IngestJob
        fields = ["kind", "status"]
