"""One FilterSet per model, shared by the pages and the API."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.identity.engine import ChainStatus
from trustrank.identity.models import (
    Certificate,
    Identity,
    IdentityCategory,
    MappingSource,
    Role,
)


class CertificateFilterSet(django_filters.FilterSet):
    environment = django_filters.CharFilter()
    spiffe_id = django_filters.CharFilter()
    trust_domain = django_filters.CharFilter()
    service = django_filters.CharFilter()
    chain_status = django_filters.ChoiceFilter(choices=ChainStatus.CHOICES)
    role = django_filters.ChoiceFilter(choices=Role.choices)
    fingerprint = django_filters.CharFilter(field_name="fingerprint_sha256")
    expires_before = django_filters.IsoDateTimeFilter(field_name="not_after", lookup_expr="lte")
    expires_after = django_filters.IsoDateTimeFilter(field_name="not_after", lookup_expr="gte")
    min_strength = django_filters.NumberFilter(field_name="strength", lookup_expr="gte")

    class Meta:
        model = Certificate
        fields = [
            "environment", "spiffe_id", "trust_domain", "service", "chain_status", "role",
            "fingerprint", "expires_before", "expires_after", "min_strength",
        ]


class IdentityFilterSet(django_filters.FilterSet):
    environment = django_filters.CharFilter()
    trust_domain = django_filters.CharFilter()
    service = django_filters.CharFilter(field_name="service_name")
    mapping_source = django_filters.ChoiceFilter(choices=MappingSource.choices)
    min_strength = django_filters.NumberFilter(field_name="strength", lookup_expr="gte")
    q = django_filters.CharFilter(field_name="spiffe_id", lookup_expr="icontains")

    class Meta:
        model = Identity
        fields = ["environment", "trust_domain", "service", "mapping_source", "min_strength", "q"]


class IdentityFindingFilterSet(django_filters.FilterSet):
    environment = django_filters.CharFilter()
    kind = django_filters.ChoiceFilter(field_name="category", choices=IdentityCategory.choices)
    status = django_filters.ChoiceFilter(
        method="filter_status", choices=[("open", "Open"), ("resolved", "Resolved")]
    )
    spiffe_id = django_filters.CharFilter()

    class Meta:
        model = Finding
        fields = ["environment", "kind", "status", "spiffe_id"]

    def filter_status(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        if value == "open":
            return qs.filter(state__in=OPEN_STATES)
        if value == "resolved":
            return qs.exclude(state__in=OPEN_STATES)
        return qs
