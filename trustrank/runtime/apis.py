"""REST API for runtime evidence: environments, services and observed call edges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal, principal_for_request
from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload
from trustrank.lib.api import Pagination, problem
from trustrank.lib.filters import unknown_params_refuse
from trustrank.ranking import selectors as ranking_selectors
from trustrank.runtime import selectors
from trustrank.runtime.deployment import (
    DeploymentError,
    DeploymentForbidden,
    DeploymentNotFound,
    DeploymentRequest,
    deployment_get_for_principal,
    deployment_set,
)
from trustrank.runtime.filters import (
    CallEdgeFilterSet,
    DeclaredServiceFilterSet,
    ServiceFilterSet,
)
from trustrank.runtime.models import (
    Deployment,
    DeploymentSource,
    Environment,
    HumanImpact,
    NodeKind,
    Service,
)
from trustrank.runtime.service_rows import (
    ServiceListing,
    ServiceRow,
    declared_untraced_for_environments,
    service_rows,
)
from trustrank.runtime.windows import window_parse

WINDOW_PARAM = OpenApiParameter(
    "window", OpenApiTypes.STR, description="15m, 1h (default), 24h, 7d … or 'all'"
)


def _window(request: Request) -> timedelta | None:
    try:
        return window_parse(request.query_params.get("window"))
    except ValueError as exc:
        raise ValidationError({"window": [str(exc)]}) from exc


def _per_minute(count: int, window: timedelta | None) -> float | None:
    if window is None:
        return None
    return round(count / max(window.total_seconds() / 60, 1), 3)


class EnvironmentSerializer(serializers.Serializer):
    name = serializers.CharField()
    team = serializers.CharField(source="team.name")
    services = serializers.IntegerField(source="service_count")
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()


class LibrarySerializer(serializers.Serializer):
    kind = serializers.CharField()
    name = serializers.CharField()
    version = serializers.CharField()
    spans = serializers.IntegerField()


class ServiceDeploymentSerializer(serializers.Serializer):
    project = serializers.CharField()
    version = serializers.CharField()
    human_impact = serializers.ChoiceField(choices=HumanImpact.choices)
    # Plain text in the schema: a second enum named "source" would make the generator
    # rename the existing ones.
    source = serializers.CharField(help_text=f"One of: {', '.join(DeploymentSource.values)}")


class ServiceOutSerializer(serializers.Serializer):
    id = serializers.IntegerField(
        allow_null=True, help_text="null: declared by a deployment, sends no traces"
    )
    name = serializers.CharField()
    namespace = serializers.CharField()
    kind = serializers.CharField()
    version = serializers.CharField()
    team = serializers.CharField()
    traced = serializers.BooleanField(
        help_text="false: a deployment declares the service but it sends no traces"
    )
    ingress = serializers.BooleanField(
        help_text="Whether ranking treats it as an entry point (as the ingress API says)"
    )
    ingress_source = serializers.ChoiceField(
        choices=["operator", "traces", "kubernetes", "none"],
        help_text="What decides `ingress`: the operator's mark, root spans from public "
        "clients, a Kubernetes entry point, or nothing",
    )
    ingress_candidate = serializers.BooleanField()
    ingress_override = serializers.BooleanField(allow_null=True)
    calls_in = serializers.IntegerField()
    calls_out = serializers.IntegerField()
    errors_in = serializers.IntegerField()
    calls_in_per_minute = serializers.FloatField(allow_null=True)
    calls_out_per_minute = serializers.FloatField(allow_null=True)
    libraries = LibrarySerializer(many=True)
    attributes = serializers.DictField(child=serializers.CharField())
    last_seen = serializers.DateTimeField(allow_null=True)
    trust = serializers.FloatField(
        allow_null=True, help_text="0-1, from the latest ranking run (null before one)"
    )
    exposure = serializers.ChoiceField(
        choices=["open", "controlled", "small", "unknown"], allow_null=True,
        help_text="SSVC System Exposure, from the latest ranking run (null before one for a "
        "traced service); unknown: a deployment declares it but it sends no traces and "
        "nothing says how it is reached (decides as open)",
    )
    deployment = ServiceDeploymentSerializer(
        allow_null=True, help_text="The project version it runs, if recorded"
    )


class EdgeOutSerializer(serializers.Serializer):
    caller = serializers.CharField()
    caller_kind = serializers.CharField()
    callee = serializers.CharField()
    callee_kind = serializers.CharField()
    calls = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_ratio = serializers.FloatField()
    calls_per_minute = serializers.FloatField(allow_null=True)
    tls_calls = serializers.IntegerField()
    mtls_calls = serializers.IntegerField()
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)
    last_seen = serializers.DateTimeField()


class EnvironmentListApi(APIView):
    required_scope = "read"
    # Declared so the schema documents the paginated envelope the view answers with.
    pagination_class = Pagination

    @extend_schema(responses=EnvironmentSerializer(many=True))
    def get(self, request: Request) -> Response:
        principal = principal_for_request(request)
        paginator = Pagination()
        page = paginator.paginate_queryset(
            selectors.environments_for_principal(principal=principal), request, view=self
        )
        return paginator.get_paginated_response(EnvironmentSerializer(page, many=True).data)


def _deployment_out(deployment: Deployment | None) -> dict[str, Any] | None:
    if deployment is None:
        return None
    return {
        "project": deployment.project_version.project.name,
        "version": deployment.project_version.version,
        "human_impact": deployment.human_impact,
        "source": deployment.source,
    }


def _service_out(row: ServiceRow, window: timedelta | None) -> dict[str, Any]:
    service, deployment, env = row.service, row.deployment, row.environment
    out: dict[str, Any] = {
        "name": row.name,
        "team": env.team.name,
        "traced": row.traced,
        "ingress": row.ingress["ingress"],
        "ingress_source": row.ingress["source"],
        "calls_in": row.rates.calls_in,
        "calls_out": row.rates.calls_out,
        "errors_in": row.rates.errors_in,
        "calls_in_per_minute": _per_minute(row.rates.calls_in, window),
        "calls_out_per_minute": _per_minute(row.rates.calls_out, window),
        "libraries": row.libraries,
        "trust": row.result.get("trust"),
        "exposure": row.exposure,
        "deployment": _deployment_out(deployment),
    }
    if service is not None:
        return {
            **out, "id": service.pk, "namespace": service.namespace, "kind": service.kind,
            "version": service.version, "ingress_candidate": service.ingress_candidate,
            "ingress_override": service.ingress_override, "attributes": service.attributes,
            "last_seen": service.last_seen,
        }
    assert deployment is not None
    return {
        **out, "id": None, "namespace": deployment.namespace, "kind": NodeKind.SERVICE,
        "version": "", "ingress_candidate": False,
        "ingress_override": deployment.ingress_override, "attributes": {}, "last_seen": None,
    }


def _page_results(page: list[Service | Deployment]) -> dict[int, dict[str, dict[str, Any]]]:
    """Environment id -> service name -> the latest ranking run's entry, for the services of
    a page only (one read per environment on it): at 100,000 services an environment's whole
    part is 50 MB of JSON."""
    names: dict[int, tuple[Environment, set[str]]] = {}
    for row in page:
        name = row.name if isinstance(row, Service) else row.service_name
        names.setdefault(row.environment_id, (row.environment, set()))[1].add(name)
    return {
        env_id: ranking_selectors.service_results_named(
            team_id=env.team_id, environment=env.name, names=found) or {}
        for env_id, (env, found) in names.items()
    }


class ServiceListApi(APIView):
    """The environment's services: the traced ones, then those a deployment declares that
    send no traces (`traced` false, `id` null)."""

    required_scope = "read"
    # Declared so the schema documents the paginated envelope the view answers with.
    pagination_class = Pagination

    @extend_schema(
        parameters=[
            WINDOW_PARAM, OpenApiParameter("name", str), OpenApiParameter("kind", str),
            OpenApiParameter("exposure", str, enum=["open", "controlled", "small", "unknown"],
                             description="As the latest ranking run says; unknown also "
                             "finds declared services that send no traces"),
            OpenApiParameter("traced", bool, description="false: declared, no traces"),
        ],
        responses=ServiceOutSerializer(many=True),
    )
    def get(self, request: Request, name: str) -> Response:
        principal = principal_for_request(request)
        window = _window(request)
        since = selectors.window_since(window)
        envs = selectors.environments_by_name(principal=principal, name=name)
        unknown_params_refuse(
            request.query_params.keys(),
            known={*ServiceFilterSet.base_filters, "window", "page", "page_size", "format"},
            what="the services list",
        )
        # Trust and exposure as the latest ranking run of each team computed them: a filter
        # by exposure reads them in PostgreSQL, and the page only its own services' entries.
        conditions = {
            env.pk: ranking_selectors.service_exposure_condition(team_id=env.team_id,
                                                                 environment=env.name)
            for env in envs
        }
        traced = ServiceFilterSet(
            request.query_params, exposure_conditions=conditions,
            queryset=selectors.services_for_environments(environments=envs),
        )
        declared = DeclaredServiceFilterSet(
            request.query_params, exposure_conditions=conditions,
            queryset=declared_untraced_for_environments(environments=envs),
        )
        if not traced.is_valid():
            raise ValidationError(traced.errors)
        declared.is_valid()
        paginator = Pagination()
        page = paginator.paginate_queryset(
            ServiceListing(traced.qs, declared.qs), request, view=self  # type: ignore[arg-type]
        ) or []
        rows = [_service_out(row, window)
                for row in service_rows(page=page, since=since, results=_page_results(page))]
        return paginator.get_paginated_response(ServiceOutSerializer(rows, many=True).data)


class EdgeListApi(APIView):
    required_scope = "read"
    # Declared so the schema documents the paginated envelope the view answers with.
    pagination_class = Pagination

    @extend_schema(
        parameters=[WINDOW_PARAM, OpenApiParameter("caller", str), OpenApiParameter("callee", str)],
        responses=EdgeOutSerializer(many=True),
    )
    def get(self, request: Request, name: str) -> Response:
        principal = principal_for_request(request)
        window = _window(request)
        since = selectors.window_since(window)
        envs = selectors.environments_by_name(principal=principal, name=name)
        unknown_params_refuse(
            request.query_params.keys(),
            known={*CallEdgeFilterSet.base_filters, "window", "page", "page_size", "format"},
            what="the call edges list",
        )
        filterset = CallEdgeFilterSet(request.query_params)
        if not filterset.is_valid():
            raise ValidationError(filterset.errors)
        queryset = filterset.filter_queryset(
            selectors.edges_aggregate(edge_filter=Q(environment__in=envs), since=since)
        )
        paginator = Pagination()
        page = paginator.paginate_queryset(queryset, request, view=self) or []
        rows = []
        for edge in selectors.edges_summarize(rows=page, since=since):
            rows.append(
                {
                    "caller": edge.caller.display_name,
                    "caller_kind": edge.caller.kind,
                    "callee": edge.callee.display_name,
                    "callee_kind": edge.callee.kind,
                    "calls": edge.calls,
                    "errors": edge.errors,
                    "error_ratio": round(edge.error_ratio, 4),
                    "calls_per_minute": _per_minute(edge.calls, window),
                    "tls_calls": edge.tls_calls,
                    "mtls_calls": edge.mtls_calls,
                    "p50_ms": edge.percentiles_ms["p50"],
                    "p95_ms": edge.percentiles_ms["p95"],
                    "p99_ms": edge.percentiles_ms["p99"],
                    "last_seen": edge.last_seen,
                }
            )
        return paginator.get_paginated_response(EdgeOutSerializer(rows, many=True).data)


class DeploymentInSerializer(serializers.Serializer):
    project = serializers.CharField(
        max_length=255, help_text="Project name (with `version`) or project version UUID."
    )
    version = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    human_impact = serializers.ChoiceField(
        choices=HumanImpact.choices, required=False, default=HumanImpact.MEDIUM
    )


class DeploymentOutSerializer(serializers.Serializer):
    environment = serializers.CharField(source="environment.name")
    service = serializers.CharField(source="service_name")
    namespace = serializers.CharField()
    project = serializers.CharField(source="project_version.project.name")
    version = serializers.CharField(source="project_version.version")
    project_version_uuid = serializers.UUIDField(source="project_version.uuid")
    human_impact = serializers.ChoiceField(choices=HumanImpact.choices)
    source = serializers.ChoiceField(choices=DeploymentSource.choices)
    set_by = serializers.CharField()
    updated_at = serializers.DateTimeField()


NAMESPACE_PARAM = OpenApiParameter("namespace", str, description="Kubernetes namespace, if any")
TEAM_PARAM = OpenApiParameter(
    "team", str, description="Team name, for a person who belongs to several teams"
)


def _deployment_team(request: Request, principal: Principal) -> Team:
    try:
        return team_for_upload(
            principal=principal, scope=Scope.SBOM_WRITE, what="deployments",
            team_hint=request.query_params.get("team", ""),
        )
    except TeamNotAllowed as exc:
        raise PermissionDenied(str(exc)) from exc
    except TeamRequired as exc:
        raise ValidationError({"team": str(exc)}) from exc


class DeploymentApi(APIView):
    """Which project version a service runs (`GET`), or record it (`PUT`, scope sbom:write)."""

    required_scopes = {"GET": Scope.READ, "PUT": Scope.SBOM_WRITE}

    @extend_schema(parameters=[NAMESPACE_PARAM], responses=DeploymentOutSerializer)
    def get(self, request: Request, name: str, service: str) -> Response:
        try:
            deployment = deployment_get_for_principal(
                principal=principal_for_request(request),
                environment=name,
                service=service,
                namespace=request.query_params.get("namespace", ""),
            )
        except DeploymentNotFound as exc:
            return problem(404, "Not found", str(exc))
        return Response(DeploymentOutSerializer(deployment).data)

    @extend_schema(
        parameters=[NAMESPACE_PARAM, TEAM_PARAM],
        request=DeploymentInSerializer,
        responses=DeploymentOutSerializer,
    )
    def put(self, request: Request, name: str, service: str) -> Response:
        principal = principal_for_request(request)
        form = DeploymentInSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        team = _deployment_team(request, principal)
        try:
            deployment = deployment_set(
                team=team,
                environment=name,
                service=service,
                namespace=request.query_params.get("namespace", ""),
                request=DeploymentRequest(**form.validated_data),
                source=DeploymentSource.API,
                principal=principal,
            )
        except DeploymentForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except DeploymentError as exc:
            return problem(400, "Invalid deployment", str(exc))
        deployment = deployment_get_for_principal(
            principal=principal,
            environment=deployment.environment.name,
            service=deployment.service_name,
            namespace=deployment.namespace,
        )
        return Response(DeploymentOutSerializer(deployment).data)
