"""Dependency-Track compatible results: what CI plugins read after uploading an SBOM.

The routes and bodies are Dependency-Track 4's (the Jenkins plugin's ApiClient and the
Maven plugin's clients work unchanged): project lookup, findings, current metrics, a metrics
refresh, policy violations (none here) and the key's team. A Dependency-Track project is a
ProjectVersion (dt_selectors.py). Another team's project is a 404.
"""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.inventory.dt_selectors import (
    SOURCES,
    dt_finding_rows,
    dt_project_get,
    dt_project_lookup,
    dt_project_versions,
)
from trustrank.inventory.dt_serializers import (
    DtFindingSerializer,
    DtMetricsSerializer,
    DtProjectSerializer,
    DtTeamSelfSerializer,
    dt_finding_data,
    dt_metrics_data,
    dt_project_data,
    name_uuid,
)
from trustrank.inventory.models import ProjectVersion
from trustrank.lib.filters import ParamRefused, unknown_params_refuse
from trustrank.lib.numbers import INT_MAX, NumberInvalid, int_parse
from trustrank.ranking.ranks import ranks_of

TOTAL_COUNT_HEADER = "X-Total-Count"
# The Dependency-Track API version these routes speak (the Jenkins plugin's connection test
# asks for 4.12 or later, and an X-Powered-By that names Dependency-Track).
DT_API_VERSION = "4.12.0"
POWERED_BY = f"Dependency-Track v{DT_API_VERSION} (TrustRank compatible API)"
# Dependency-Track's paging parameters (Alpine's): pageNumber from 1 with pageSize, or
# offset with limit. Without them the whole list.
PAGING_PARAMS = ("pageNumber", "pageSize", "offset", "limit")
MAX_PAGE_SIZE = 10_000
_FALSE_WORDS = ("false", "0", "no")
_TRUE_WORDS = ("true", "1", "yes")
_TEXT_MAX = 1024

# The Dependency-Track permissions a key's TrustRank scopes amount to (team/self).
SCOPE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    Scope.READ: ("VIEW_PORTFOLIO", "VIEW_VULNERABILITY", "VIEW_POLICY_VIOLATION"),
    # An upload is always analysed here: Dependency-Track asks VULNERABILITY_ANALYSIS for it.
    Scope.SBOM_WRITE: ("BOM_UPLOAD", "PROJECT_CREATION_UPLOAD", "VULNERABILITY_ANALYSIS"),
    Scope.TRIAGE: ("VULNERABILITY_ANALYSIS",),
    Scope.ADMIN: ("PORTFOLIO_MANAGEMENT", "ACCESS_MANAGEMENT"),
}

_UUID_PATH = OpenApiParameter("uuid", str, location=OpenApiParameter.PATH,
                              description="the project version's uuid")
_PAGING = [
    OpenApiParameter("pageNumber", int, description="page number from 1 (with pageSize)"),
    OpenApiParameter("pageSize", int, description=f"at most {MAX_PAGE_SIZE}"),
    OpenApiParameter("offset", int),
    OpenApiParameter("limit", int),
]
_TOTAL = OpenApiParameter(TOTAL_COUNT_HEADER, int, location=OpenApiParameter.HEADER,
                          response=True, description="rows before paging")


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if "\x00" in value or len(value) > _TEXT_MAX:
        raise ParamRefused(name, {name: [f"{name} must be text of at most {_TEXT_MAX} "
                                         "characters without NUL"]})
    return value


def _flag(request: Request, name: str) -> bool:
    value = (_text(request, name) or "").strip().lower()
    if value in ("", *_FALSE_WORDS):
        return False
    if value in _TRUE_WORDS:
        return True
    raise ParamRefused(name, {name: [f"{name} must be true or false"]})


def _project_uuid(raw: str) -> uuid_module.UUID:
    try:
        return uuid_module.UUID(raw)
    except ValueError as exc:
        raise ParamRefused("uuid", {"uuid": [f"{raw[:80]!r} is not a UUID"]}) from exc


def _paged(request: Request, rows: list[Any]) -> Response:
    """`rows` cut to the page asked for, with the total in X-Total-Count."""
    numbers: dict[str, int] = {}
    for name in PAGING_PARAMS:
        raw = (_text(request, name) or "").strip()
        if raw:
            minimum = 0 if name == "offset" else 1
            try:
                numbers[name] = int_parse(raw, minimum=minimum, maximum=INT_MAX)
            except NumberInvalid as exc:
                raise ParamRefused(name, {name: [f"{name} {exc}"]}) from exc
    for name in ("pageSize", "limit"):
        if numbers.get(name, 0) > MAX_PAGE_SIZE:
            raise ParamRefused(name, {name: [f"{name} must be at most {MAX_PAGE_SIZE}"]})
    size = numbers.get("pageSize") or numbers.get("limit")
    start = numbers.get("offset", 0)
    if "pageNumber" in numbers and size:
        start = (numbers["pageNumber"] - 1) * size
    page = rows[start : start + size] if size else rows[start:]
    response = Response(page)
    response[TOTAL_COUNT_HEADER] = str(len(rows))
    return response


def _findings(pv: ProjectVersion, *, suppressed: bool, source: str | None) -> list[dict[str, Any]]:
    rows = dt_finding_rows(project_version=pv, suppressed=suppressed, source=source)
    # The rank counted from the queue key (the stored one is the rank as of the run that last
    # wrote the row): about 0.15 ms a ranked finding, for one version's findings.
    ranks = ranks_of(r["id"] for r in rows if r["ranked__score"] is not None)
    return [dt_finding_data({**r, "rank": ranks.get(r["id"], (None,))[0]}, project_version=pv)
            for r in rows]


def _metrics(pv: ProjectVersion) -> dict[str, Any]:
    # Counted from the very list `suppressed=true` shows: the two always agree.
    findings = _findings(pv, suppressed=True, source=None)
    return dt_metrics_data(findings, project_version=pv, now=timezone.now())


class _DtApi(APIView):
    required_scope: str | tuple[str, ...] = Scope.READ
    # Query parameters the route takes; any other is a 400 naming it.
    params: tuple[str, ...] = ()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        unknown_params_refuse(request.query_params.keys(), known=(*self.params, "format"),
                              what="this Dependency-Track route")

    def finalize_response(self, request: Request, response: Any, *args: Any,
                          **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["X-Powered-By"] = POWERED_BY
        return response

    def project(self, request: Request, uuid: str) -> ProjectVersion:
        return dt_project_get(principal=principal_for_request(request), uuid=_project_uuid(uuid))


@extend_schema(
    summary="Dependency-Track compatible: a project (version) by name and version",
    parameters=[OpenApiParameter("name", str, required=True), OpenApiParameter("version", str)],
    responses={200: DtProjectSerializer, 400: OpenApiResponse(description="name missing"),
               404: OpenApiResponse(description="no such project of your teams")},
)
class DependencyTrackProjectLookupApi(_DtApi):
    params = ("name", "version")

    def get(self, request: Request) -> Response:
        name = (_text(request, "name") or "").strip()
        if not name:
            raise ParamRefused("name", {"name": ["name is required: the project's name"]})
        version = (_text(request, "version") or "").strip()
        pv = dt_project_lookup(principal=principal_for_request(request), name=name,
                               version=version)
        return Response(dt_project_data(pv, metrics=_metrics(pv)))


@extend_schema(
    summary="Dependency-Track compatible: the project versions of your teams",
    parameters=[
        OpenApiParameter("name", str, description="exact project name"),
        OpenApiParameter("searchText", str, description="part of the name"),
        OpenApiParameter("excludeInactive", bool),
        OpenApiParameter("onlyRoot", bool),
        OpenApiParameter("sortName", str, enum=["name", "version", "lastBomImport"]),
        OpenApiParameter("sortOrder", str, enum=["asc", "desc"]),
        *_PAGING,
    ],
    responses={200: DtProjectSerializer(many=True)},
)
class DependencyTrackProjectListApi(_DtApi):
    params = ("name", "searchText", "excludeInactive", "onlyRoot", "sortName", "sortOrder",
              *PAGING_PARAMS)
    _SORTS = {"name": "project__name", "version": "version",
              "lastBomImport": "current_sbom__created_at"}

    def get(self, request: Request) -> Response:
        qs = dt_project_versions(principal=principal_for_request(request))
        name = _text(request, "name")
        if name:
            qs = qs.filter(project__name=name)
        search = _text(request, "searchText")
        if search:
            qs = qs.filter(project__name__icontains=search)
        _flag(request, "excludeInactive")  # every project here is active
        _flag(request, "onlyRoot")  # and none has a parent
        sort = _text(request, "sortName") or "name"
        if sort not in self._SORTS:
            raise ParamRefused("sortName", {"sortName": [f"sortName must be one of "
                                                         f"{', '.join(self._SORTS)}"]})
        order = (_text(request, "sortOrder") or "asc").lower()
        if order not in ("asc", "desc"):
            raise ParamRefused("sortOrder", {"sortOrder": ["sortOrder must be asc or desc"]})
        prefix = "-" if order == "desc" else ""
        qs = qs.order_by(f"{prefix}{self._SORTS[sort]}", "project__name", "version", "pk")
        return _paged(request, [dt_project_data(pv) for pv in qs])


@extend_schema(
    summary="Dependency-Track compatible: a project (version) by uuid",
    parameters=[_UUID_PATH],
    responses={200: DtProjectSerializer, 404: OpenApiResponse(description="not yours")},
)
class DependencyTrackProjectApi(_DtApi):
    def get(self, request: Request, uuid: str) -> Response:
        pv = self.project(request, uuid)
        return Response(dt_project_data(pv, metrics=_metrics(pv)))


@extend_schema(
    summary="Dependency-Track compatible: a project's findings, in TrustRank's rank order",
    parameters=[
        _UUID_PATH,
        OpenApiParameter("suppressed", bool,
                         description="also the findings a person closed (suppressed)"),
        OpenApiParameter("source", str, enum=SOURCES),
        *_PAGING,
        _TOTAL,
    ],
    responses={200: DtFindingSerializer(many=True)},
)
class DependencyTrackFindingListApi(_DtApi):
    params = ("suppressed", "source", *PAGING_PARAMS)

    def get(self, request: Request, uuid: str) -> Response:
        pv = self.project(request, uuid)
        source = (_text(request, "source") or "").strip().upper() or None
        if source is not None and source not in SOURCES:
            raise ParamRefused("source", {"source": [f"source must be one of "
                                                     f"{', '.join(SOURCES)}"]})
        findings = _findings(pv, suppressed=_flag(request, "suppressed"), source=source)
        return _paged(request, findings)


@extend_schema(
    summary="Dependency-Track compatible: a project's current metrics (always up to date)",
    parameters=[_UUID_PATH],
    responses={200: DtMetricsSerializer},
)
class DependencyTrackMetricsCurrentApi(_DtApi):
    def get(self, request: Request, uuid: str) -> Response:
        return Response(_metrics(self.project(request, uuid)))


@extend_schema(
    summary="Dependency-Track compatible: refresh a project's metrics (they are live here)",
    parameters=[_UUID_PATH],
    responses={200: OpenApiResponse(description="nothing to refresh: metrics are computed "
                                                "on every read")},
)
class DependencyTrackMetricsRefreshApi(_DtApi):
    required_scope = (Scope.READ, Scope.SBOM_WRITE)

    def get(self, request: Request, uuid: str) -> Response:
        self.project(request, uuid)
        return Response(status=200)


@extend_schema(
    summary="Dependency-Track compatible: a project's policy violations (TrustRank has none)",
    parameters=[_UUID_PATH, OpenApiParameter("suppressed", bool), *_PAGING, _TOTAL],
    responses={200: OpenApiResponse(description="an empty JSON array")},
)
class DependencyTrackViolationListApi(_DtApi):
    params = ("suppressed", *PAGING_PARAMS)

    def get(self, request: Request, uuid: str) -> Response:
        self.project(request, uuid)
        _flag(request, "suppressed")
        return _paged(request, [])


@extend_schema(
    summary="Dependency-Track compatible: the API key's team and its permissions",
    responses={200: DtTeamSelfSerializer,
               400: OpenApiResponse(description="not an API key")},
)
class DependencyTrackTeamSelfApi(_DtApi):
    required_scope = (Scope.READ, Scope.SBOM_WRITE)

    def get(self, request: Request) -> Response:
        principal = principal_for_request(request)
        key = principal.api_key
        if key is None:
            raise ParamRefused("X-Api-Key", {"X-Api-Key": ["team/self answers for an API key"]})
        team = Team.objects.get(pk=key.team_id)
        scopes = principal.scopes_by_team.get(key.team_id, frozenset())
        permissions = sorted({p for s in scopes for p in SCOPE_PERMISSIONS.get(s, ())})
        return Response({
            "uuid": name_uuid("team", team.pk),
            "name": team.name,
            "permissions": [{"name": p} for p in permissions],
        })


@extend_schema(
    summary="Dependency-Track compatible: the API version (the Jenkins plugin's connection test)",
    responses={200: inline_serializer("DtVersion", fields={
        "version": serializers.CharField(), "application": serializers.CharField()})},
)
class DependencyTrackVersionApi(_DtApi):
    required_scope = (Scope.READ, Scope.SBOM_WRITE)

    def get(self, request: Request) -> Response:
        return Response({"version": DT_API_VERSION, "application": "TrustRank"})
