"""FilterSets shared by the runtime pages and the API."""

from __future__ import annotations

import django_filters

from trustrank.runtime.models import CallEdgeBucket, NodeKind, Service


class ServiceFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    kind = django_filters.ChoiceFilter(choices=NodeKind.choices)
    ingress_candidate = django_filters.BooleanFilter()

    class Meta:
        model = Service
        fields = ["name", "kind", "ingress_candidate"]


class CallEdgeFilterSet(django_filters.FilterSet):
    caller = django_filters.CharFilter(field_name="caller__name", lookup_expr="iexact")
    callee = django_filters.CharFilter(field_name="callee__name", lookup_expr="iexact")

    class Meta:
        model = CallEdgeBucket
        fields = ["caller", "callee"]
