from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from trustrank.inventory.models import Component, Project


class ProjectFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = Project
        fields = ["name"]


class ComponentFilterSet(django_filters.FilterSet):
    """Shared by the project page and GET /api/v1/projects/<id>/components."""

    q = django_filters.CharFilter(method="search", label="Name or purl")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    purl = django_filters.CharFilter(field_name="purl", lookup_expr="icontains")
    version = django_filters.CharFilter(field_name="sbom__project_version__version")

    class Meta:
        model = Component
        fields = ["q", "name", "purl", "version"]

    def search(self, queryset: QuerySet[Component], name: str, value: str) -> QuerySet[Component]:
        return queryset.filter(Q(name__icontains=value) | Q(purl__icontains=value))
