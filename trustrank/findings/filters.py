"""One FilterSet for findings, shared by the list page and the API."""

from __future__ import annotations

import re
from typing import Any

import django_filters
from django.db.models import F, Q, QuerySet

from trustrank.findings.models import (
    OPEN_STATES,
    Finding,
    FindingKind,
    MatchStatus,
    Severity,
    TriageState,
)
from trustrank.vulns.engine.ecosystems import normalize_name

_ID = re.compile(r"^[A-Za-z]+(-[A-Za-z0-9._:]+)+$")


def _id_spellings(value: str) -> list[str]:
    """Advisory ids as databases write them: CVE-… upper case, GHSA-xxxx lower case after
    the prefix, most others upper case."""
    prefix, _, rest = value.partition("-")
    return list(
        {value, value.upper(), f"{prefix.upper()}-{rest.lower()}", f"{prefix.upper()}-{rest}"}
    )


class FindingFilterSet(django_filters.FilterSet):
    """The findings list's filters, for the page and the API alike."""

    kind = django_filters.MultipleChoiceFilter(choices=FindingKind.choices)
    category = django_filters.CharFilter()
    environment = django_filters.CharFilter()
    service = django_filters.NumberFilter(field_name="service_id")
    project = django_filters.NumberFilter(field_name="project_id")
    project_version = django_filters.NumberFilter(field_name="project_version_id")
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    state = django_filters.MultipleChoiceFilter(choices=TriageState.choices)
    match_status = django_filters.MultipleChoiceFilter(choices=MatchStatus.choices)
    kev = django_filters.BooleanFilter(field_name="in_kev")
    epss_min = django_filters.NumberFilter(field_name="epss", lookup_expr="gte")
    epss_max = django_filters.NumberFilter(field_name="epss", lookup_expr="lte")
    open = django_filters.BooleanFilter(method="filter_open")
    q = django_filters.CharFilter(method="filter_q", label="CVE, GHSA or package")
    decision = django_filters.MultipleChoiceFilter(
        field_name="ranked__decision",
        choices=[
            ("immediate", "Immediate"),
            ("out-of-cycle", "Out-of-cycle"),
            ("scheduled", "Scheduled"),
            ("defer", "Defer"),
        ]
    )
    ordering = django_filters.ChoiceFilter(
        method="filter_ordering",
        choices=[
            ("rank", "Contextual rank"),
            ("-rank", "Contextual rank, last first"),
            ("baseline", "Baseline priority"),
        ],
        label="Order",
    )

    class Meta:
        model = Finding
        fields: list[str] = []

    def filter_ordering(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        if value == "rank":
            return qs.order_by(
                F("ranked__rank").asc(nulls_last=True), "-baseline_priority", "-id"
            )
        if value == "-rank":
            return qs.order_by(F("ranked__rank").desc(nulls_first=True), "id")
        return qs

    def filter_open(self, qs: QuerySet[Finding], name: str, value: Any) -> QuerySet[Finding]:
        if value is None:
            return qs
        return qs.filter(state__in=OPEN_STATES) if value else qs.exclude(state__in=OPEN_STATES)

    def filter_q(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        value = (value or "").strip()
        if not value:
            return qs
        # Ids use the GIN index on aliases; packages a prefix index on the normalised name.
        cond = (
            Q(package_name__startswith=value.lower())
            | Q(package_name__startswith=normalize_name("PyPI", value))
            | Q(component_name__startswith=value)
        )
        if _ID.match(value):
            cond |= Q(aliases__overlap=_id_spellings(value))
        return qs.filter(cond)
