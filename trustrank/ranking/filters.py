"""One FilterSet for the ranked queue, shared by the priorities page and the API."""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import OpenApiParameter

from trustrank.findings.models import Finding, FindingKind

DECISIONS = [
    ("immediate", "Immediate"),
    ("out-of-cycle", "Out-of-cycle"),
    ("scheduled", "Scheduled"),
    ("defer", "Defer"),
]
EXPOSURES = [("open", "Open"), ("controlled", "Controlled"), ("small", "Small")]
REACHABILITY = [
    ("observed", "Observed"),
    ("not observed", "Not observed"),
    ("unknown", "Unknown"),
    ("not applicable", "Not applicable"),
]


class PriorityFilterSet(django_filters.FilterSet):
    # distinct=False: each finding joins at most one rank context, so there is nothing to
    # deduplicate, and MultipleChoiceFilter's default SELECT DISTINCT makes PostgreSQL
    # read and sort the whole queue (seconds at a million findings) before the first page.
    decision = django_filters.MultipleChoiceFilter(
        field_name="ranked__decision", choices=DECISIONS, distinct=False
    )
    kind = django_filters.MultipleChoiceFilter(choices=FindingKind.choices, distinct=False)
    exposure = django_filters.MultipleChoiceFilter(
        field_name="ranked__context__data__exposure", choices=EXPOSURES, distinct=False
    )
    reachability = django_filters.MultipleChoiceFilter(
        field_name="ranked__context__data__reachability", choices=REACHABILITY, distinct=False
    )
    kev = django_filters.BooleanFilter(field_name="in_kev")

    class Meta:
        model = Finding
        fields: list[str] = []

    def is_filtered(self) -> bool:
        return any(self.data.get(name) not in (None, "") for name in self.filters)

    @classmethod
    def openapi_parameters(cls) -> list[OpenApiParameter]:
        params: list[OpenApiParameter] = []
        for name, f in cls.base_filters.items():
            many = isinstance(f, django_filters.MultipleChoiceFilter)
            kind: Any = bool if isinstance(f, django_filters.BooleanFilter) else str
            params.append(
                OpenApiParameter(name, kind, many=many, explode=True if many else None)
            )
        return params
