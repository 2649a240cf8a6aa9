from __future__ import annotations

from typing import Any

from rest_framework.generics import ListAPIView, RetrieveAPIView

from trustrank.accounts.principal import principal_for_request
from trustrank.inventory.filters import ComponentFilterSet, ProjectFilterSet
from trustrank.inventory.models import Component, Project
from trustrank.inventory.selectors import project_components, project_get, project_list
from trustrank.inventory.serializers import ComponentSerializer, ProjectSerializer


class ProjectListApi(ListAPIView[Project]):
    serializer_class = ProjectSerializer
    filterset_class = ProjectFilterSet

    def get_queryset(self) -> Any:
        return project_list(principal=principal_for_request(self.request))


class ProjectDetailApi(RetrieveAPIView[Project]):
    serializer_class = ProjectSerializer

    def get_object(self) -> Project:
        return project_get(
            principal=principal_for_request(self.request), project_id=self.kwargs["project_id"]
        )


class ProjectComponentListApi(ListAPIView[Component]):
    """Components of the project's current SBOMs (one per version); filter by name/purl/version."""

    serializer_class = ComponentSerializer
    filterset_class = ComponentFilterSet
    queryset = Component.objects.none()  # for the schema; get_queryset scopes the real one

    def get_queryset(self) -> Any:
        project = project_get(
            principal=principal_for_request(self.request), project_id=self.kwargs["project_id"]
        )
        return project_components(project=project)
