from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.inventory.filters import ComponentFilterSet, ProjectFilterSet
from trustrank.inventory.models import Component, Project
from trustrank.inventory.selectors import (
    project_components,
    project_get,
    project_list,
    project_open_over_time,
    project_risk_for_projects,
    project_risk_summary,
)
from trustrank.inventory.serializers import ComponentSerializer, ProjectSerializer
from trustrank.lib.api import problem
from trustrank.lib.numbers import int_or_none

RISK_MAX_DAYS = 366


class ProjectListApi(ListAPIView[Project]):
    """Projects of the caller's teams; each with `risk` (open findings by decision and
    severity, KEV and overdue counts), computed for the page in one grouped query."""

    serializer_class = ProjectSerializer
    filterset_class = ProjectFilterSet
    required_scope = Scope.READ

    def get_queryset(self) -> Any:
        return project_list(principal=principal_for_request(self.request))

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        projects = list(page if page is not None else queryset)
        context = {**self.get_serializer_context(),
                   "risks": project_risk_for_projects(projects=projects)}
        data = ProjectSerializer(projects, many=True, context=context).data
        if page is not None:
            return self.get_paginated_response(data)
        return Response(data)


class ProjectDetailApi(RetrieveAPIView[Project]):
    serializer_class = ProjectSerializer
    required_scope = Scope.READ

    def get_object(self) -> Project:
        return project_get(
            principal=principal_for_request(self.request), project_id=self.kwargs["project_id"]
        )

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        project = self.get_object()
        context = {**self.get_serializer_context(),
                   "risks": project_risk_for_projects(projects=[project])}
        return Response(ProjectSerializer(project, context=context).data)


class ProjectRiskApi(APIView):
    """A project's risk summary (open findings by decision and severity, KEV, overdue), open
    findings per day over `days` (default 90) and mean time to remediate by severity."""

    required_scope = Scope.READ

    @extend_schema(parameters=[OpenApiParameter("days", int)], responses={200: None})
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get(principal=principal_for_request(request), project_id=project_id)
        raw = request.query_params.get("days", "90")
        days = int_or_none(raw) or 0
        if not 1 <= days <= RISK_MAX_DAYS:
            detail = f"`days` must be an integer from 1 to {RISK_MAX_DAYS}"
            return problem(400, "Bad request", detail, errors={"days": [detail]})
        now = timezone.now()
        summary = project_risk_summary(project=project, now=now)
        series = project_open_over_time(project=project, days=days, today=now.date())
        return Response(
            {
                "project": {"id": project.pk, "name": project.name},
                "summary": summary.risk.as_dict(),
                "mttr": summary.mttr.as_dict(),
                "open_over_time": [{"date": p.day, "open": p.open} for p in series],
            }
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
