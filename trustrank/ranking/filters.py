"""One FilterSet for the ranked queue, shared by the priorities page and the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter

from trustrank.findings.choices import OPEN_STATES, FindingKind, TriageState
from trustrank.findings.filters import OPEN_CHOICES, OpenFilter, StrictBooleanFilter
from trustrank.findings.models import Finding
from trustrank.lib.filters import RefFilter

DECISIONS = [
    ("immediate", "Immediate"),
    ("out-of-cycle", "Out-of-cycle"),
    ("scheduled", "Scheduled"),
    ("defer", "Defer"),
]
EXPOSURES = [("open", "Open"), ("controlled", "Controlled"), ("small", "Small"),
             ("unknown", "Unknown (declared, sends no traces)")]
REACHABILITY = [
    ("observed", "Observed"),
    ("not observed", "Not observed"),
    ("unknown", "Unknown"),
    ("not applicable", "Not applicable"),
]


class PriorityFilterSet(django_filters.FilterSet):
    """The queue's filters. Open findings by default (`open=all` or `state` show others that
    still hold a rank); an invalid value is a 400 naming the field (API) or a form error."""

    open = OpenFilter(
        method="filter_open", choices=OPEN_CHOICES, empty_label=None, label="Show"
    )
    state = django_filters.MultipleChoiceFilter(choices=TriageState.choices, distinct=False)
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
    kev = StrictBooleanFilter(field_name="in_kev")
    # An id or a name, as on the findings list.
    project = RefFilter(field_name="project", label="Project")

    class Meta:
        model = Finding
        fields: list[str] = []

    def _given(self, name: str) -> bool:
        data = self.data or {}
        if hasattr(data, "getlist"):
            return any(v not in (None, "") for v in data.getlist(name))
        return data.get(name) not in (None, "")

    def is_filtered(self) -> bool:
        return any(self._given(name) for name in self.filters)

    def filter_queryset(self, queryset: QuerySet[Finding]) -> QuerySet[Finding]:
        qs = super().filter_queryset(queryset)
        if "open" not in (self.data or {}) and not self._given("state"):
            qs = qs.filter(state__in=OPEN_STATES)
        return qs

    def filter_open(self, qs: QuerySet[Finding], name: str, value: Any) -> QuerySet[Finding]:
        if value == "true":
            return qs.filter(state__in=OPEN_STATES)
        if value == "false":
            return qs.exclude(state__in=OPEN_STATES)
        return qs

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
