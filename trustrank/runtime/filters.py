"""FilterSets shared by the runtime pages and the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from trustrank.runtime.models import CallEdgeBucket, Deployment, NodeKind, Service

EXPOSURES = [(v, v) for v in ("open", "controlled", "small", "unknown")]

# Per environment id: the SQL condition, over the column named, that a service's exposure,
# as the latest ranking run says, is the value given (or, `other` true, is known and is not
# it), as a boolean expression. The lists filter in PostgreSQL instead of naming every
# service of that exposure from Python: at 100,000 services that list made every count and
# page statement (9.6 s a request).
ExposureConditions = dict[int, Callable[[str, str, bool], Any]]


class _Exposed(django_filters.FilterSet):
    """Filters on what the latest ranking run says (`exposure_conditions`, given by the
    caller: the runtime app does not read ranking runs) and on whether the service sends
    traces."""

    exposure = django_filters.ChoiceFilter(choices=EXPOSURES, method="filter_exposure")
    traced = django_filters.BooleanFilter(method="filter_traced")
    name_field = "name"
    is_traced = True

    def __init__(self, *args: Any, exposure_conditions: ExposureConditions,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exposure_conditions = exposure_conditions

    def _names(self, value: str, *, other: bool) -> Q:
        """The services whose exposure is `value` (`other`: is known and is not `value`),
        environment by environment."""
        model = self._meta.model
        column = f'"{model._meta.db_table}"."{model._meta.get_field(self.name_field).column}"'
        q = Q(pk__in=[])
        for env_id, condition in self.exposure_conditions.items():
            q |= Q(condition(column, value, other), environment_id=env_id)
        return q

    def filter_exposure(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        if value == "unknown" and not self.is_traced:
            # A declared service that sends no traces is unknown until a run says otherwise.
            return queryset.exclude(self._names("unknown", other=True))
        return queryset.filter(self._names(value, other=False))

    def filter_traced(self, queryset: QuerySet[Any], name: str, value: bool) -> QuerySet[Any]:
        return queryset if value == self.is_traced else queryset.none()


class ServiceFilterSet(_Exposed):
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    kind = django_filters.ChoiceFilter(choices=NodeKind.choices)
    ingress_candidate = django_filters.BooleanFilter()

    class Meta:
        model = Service
        fields = ["name", "kind", "ingress_candidate", "exposure", "traced"]


class DeclaredServiceFilterSet(_Exposed):
    """The same parameters as `ServiceFilterSet`, over the deployments of services that send
    no traces: kind `service`, never an ingress candidate (no root spans seen)."""

    name = django_filters.CharFilter(field_name="service_name", lookup_expr="icontains")
    kind = django_filters.ChoiceFilter(choices=NodeKind.choices, method="filter_kind")
    ingress_candidate = django_filters.BooleanFilter(method="filter_candidate")
    name_field = "service_name"
    is_traced = False

    class Meta:
        model = Deployment
        fields = ["name", "kind", "ingress_candidate", "exposure", "traced"]

    def filter_kind(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset if value == NodeKind.SERVICE else queryset.none()

    def filter_candidate(self, queryset: QuerySet[Any], name: str, value: bool) -> QuerySet[Any]:
        return queryset.none() if value else queryset


class CallEdgeFilterSet(django_filters.FilterSet):
    caller = django_filters.CharFilter(field_name="caller__name", lookup_expr="iexact")
    callee = django_filters.CharFilter(field_name="callee__name", lookup_expr="iexact")

    class Meta:
        model = CallEdgeBucket
        fields = ["caller", "callee"]
