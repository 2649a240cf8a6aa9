"""REST API for exports: `GET /api/v1/exports?format=…&<findings filters>` streams a small
export straight back or answers 202 with a job to poll; `GET /api/v1/exports/<id>` is the
job's status, `GET /api/v1/exports/<id>/download` its file. Scope `read` or `audit:read`."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.http import FileResponse, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from trustrank.accounts.principal import principal_for_request
from trustrank.exports import selectors
from trustrank.exports.models import ExportFormat, ExportStatus
from trustrank.exports.serializers import export_status_data
from trustrank.exports.services.params import (
    EXPORT_SCOPES,
    ExportParamError,
    export_request_parse,
    export_teams,
)
from trustrank.exports.services.rows import export_count
from trustrank.exports.services.run import (
    export_create,
    export_path,
    export_selection_for,
    export_stream,
    export_stream_cap,
)
from trustrank.exports.services.vex_cyclonedx import InvalidDocument
from trustrank.inventory.models import ProjectVersion
from trustrank.jobs.errors import JobsBusy
from trustrank.lib.api import jobs_busy_response, problem_response

log = logging.getLogger(__name__)


class _Settings:
    """DRF's settings, less the `?format=` renderer override: here `format` names the file."""

    URL_FORMAT_OVERRIDE = None

    def __getattr__(self, name: str) -> Any:
        return getattr(api_settings, name)


class FileFormatNegotiation(DefaultContentNegotiation):
    settings = _Settings()

    def select_renderer(
        self, request: Any, renderers: Any, format_suffix: str | None = None
    ) -> Any:
        # A download is not a rendered resource: an Accept of text/csv must not 406.
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except exceptions.NotAcceptable:
            return renderers[0], renderers[0].media_type


def export_response(
    *,
    principal: Any,
    params: Any,
    default_format: str | None = None,
    always_stream: bool = False,
) -> HttpResponseBase:
    """Shared by the API and the report page: parse, then stream or queue."""
    try:
        req = export_request_parse(
            principal=principal, params=params, default_format=default_format
        )
        selection = export_selection_for(req)
    except ExportParamError as exc:
        detail = str(exc) if str(exc).startswith(exc.param) else f"{exc.param}: {exc}"
        return problem_plain(400, "Invalid export parameter", detail, param=exc.param)
    cap = export_stream_cap(req.format)
    matched = export_count(selection, cap=None if always_stream else cap)
    if matched > cap and not always_stream:
        try:
            with transaction.atomic():
                export = export_create(principal=principal, req=req, streamed=False)
        except JobsBusy as exc:
            return jobs_busy_response(exc)
        body = export_status_data(export)
        return Response(body, status=202, headers={"Location": body["status_url"]})
    export = export_create(principal=principal, req=req, streamed=True, total=matched)
    try:
        streamed = export_stream(export=export, selection=selection)
    except InvalidDocument as exc:
        return problem_plain(500, "Export failed", f"the document did not validate: {exc}")
    response = StreamingHttpResponse(streamed.chunks, content_type=export.content_type)
    disposition = "inline" if export.format == ExportFormat.HTML else "attachment"
    response["Content-Disposition"] = f'{disposition}; filename="{export.filename}"'
    response["X-Export-Id"] = str(export.pk)
    response["Cache-Control"] = "no-store"
    _audit_headers(response, streamed.meta)
    return response


def _audit_headers(response: HttpResponseBase, meta: dict[str, Any]) -> None:
    """The audit chain as the export saw it, for every format (a CSV has no place of its own
    for it): its head digest, and whether it verified intact."""
    chain = (meta or {}).get("audit_chain") or {}
    if chain.get("head_digest"):
        response["X-TrustRank-Audit-Head"] = str(chain["head_digest"])
    if "intact" in chain:
        response["X-TrustRank-Audit-Intact"] = "true" if chain["intact"] else "false"


class ExportsApi(APIView):
    """Export findings with their triage, rank, decision and explanation."""

    required_scope = EXPORT_SCOPES
    content_negotiation_class = FileFormatNegotiation

    @extend_schema(
        parameters=[
            OpenApiParameter("format", OpenApiTypes.STR, enum=ExportFormat.values, required=True),
            OpenApiParameter("as_of", OpenApiTypes.DATETIME),
            OpenApiParameter("ranking_run", OpenApiTypes.INT),
            OpenApiParameter("team", OpenApiTypes.STR, description="a team id or name"),
            OpenApiParameter(
                "project_version", OpenApiTypes.STR,
                description="A findings filter (an id or a uuid); format=cyclonedx-vex "
                "describes one project version and needs it when the other filters leave "
                "several.",
            ),
        ],
        responses={
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "application/vnd.cyclonedx+json"): OpenApiTypes.OBJECT,
            (200, "application/pdf"): OpenApiTypes.BINARY,
            (200, "text/html"): OpenApiTypes.BINARY,
            (202, "application/json"): OpenApiTypes.OBJECT,
        },
    )
    def get(self, request: Request) -> Any:
        return export_response(
            principal=principal_for_request(request),
            params=request.query_params,
        )


class ProjectVexApi(APIView):
    """Dependency-Track's `GET /api/v1/vex/cyclonedx/project/{uuid}`: the CycloneDX VEX of
    one project version, by its uuid (the one the BOM upload answered with)."""

    required_scope = EXPORT_SCOPES
    content_negotiation_class = FileFormatNegotiation

    @extend_schema(responses={(200, "application/vnd.cyclonedx+json"): OpenApiTypes.OBJECT})
    def get(self, request: Request, uuid: Any) -> HttpResponseBase:
        principal = principal_for_request(request)
        pv = ProjectVersion.objects.filter(
            uuid=uuid, project__team_id__in=export_teams(principal)
        ).values_list("pk", "project__team_id").first()
        if pv is None:
            return problem_plain(404, "Not found", f"no project {uuid} you may export from")
        params = request.query_params.copy()
        params.setlist("format", [ExportFormat.CYCLONEDX_VEX])
        params.setlist("project_version", [str(pv[0])])
        params.setlist("team", [str(pv[1])])
        return export_response(principal=principal, params=params, always_stream=True)


class ExportDetailApi(APIView):
    required_scope = EXPORT_SCOPES

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, export_id: int) -> Response:
        export = selectors.export_get_for_principal(
            principal=principal_for_request(request), export_id=export_id
        )
        return Response(export_status_data(export))


def export_file_response(export: Any) -> HttpResponseBase:
    if export.streamed or export.status != ExportStatus.DONE:
        return problem_plain(409, "Not ready", f"export {export.pk} has no file to download")
    path = export_path(export)
    if not path.is_file():
        # Files are never removed while their row says done: a missing one is a web host that
        # does not see the workers' TRUSTRANK_EXPORT_DIR (README: more than one host).
        log.error("export %s is done but its file %s is not here: TRUSTRANK_EXPORT_DIR must "
                  "be storage every web and worker host shares", export.pk, path)
        return problem_plain(410, "Gone", f"the file of export {export.pk} is no longer kept")
    response = FileResponse(
        path.open("rb"), as_attachment=True, filename=export.filename,
        content_type=export.content_type,
    )
    response["X-Export-Sha256"] = export.sha256
    _audit_headers(response, export.metadata)
    return response


def problem_plain(status: int, title: str, detail: str, **extra: Any) -> HttpResponse:
    return problem_response(status, title, detail, **extra)


class ExportDownloadApi(APIView):
    required_scope = EXPORT_SCOPES
    content_negotiation_class = FileFormatNegotiation

    @extend_schema(
        responses={
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "application/vnd.cyclonedx+json"): OpenApiTypes.OBJECT,
            (200, "application/pdf"): OpenApiTypes.BINARY,
            (200, "text/html"): OpenApiTypes.BINARY,
        }
    )
    def get(self, request: Request, export_id: int) -> HttpResponseBase:
        export = selectors.export_get_for_principal(
            principal=principal_for_request(request), export_id=export_id
        )
        return export_file_response(export)
