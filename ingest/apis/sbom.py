"""SBOM receivers: TrustRank's own endpoint and the Dependency-Track compatible ones."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.models import IngestJob
from ingest.receivers import (
    RawBodyParser,
    ReceiverMixin,
    UploadRefused,
    accepted,
    body_or_file,
    param,
    priority_from,
    team_for_write,
)
from ingest.selectors import job_get
from ingest.submit import SbomTarget, parse_bool, sbom_submit
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request


class _SbomReceiver(ReceiverMixin, APIView):
    parser_classes = [MultiPartParser, FormParser, RawBodyParser]
    required_scope = Scope.SBOM_WRITE

    def _submit(self, request: Request, *, body: bytes, target: SbomTarget, filename: str) -> Any:
        principal = principal_for_request(request)
        priority = priority_from(request)
        team = team_for_write(
            principal=principal,
            scope=Scope.SBOM_WRITE,
            what="SBOMs",
            team_hint=param(request, "team"),
        )
        return sbom_submit(
            principal=principal,
            team=team,
            body=body,
            content_encoding=request.headers.get("Content-Encoding", ""),
            target=target,
            priority=priority,
            content_type=request.content_type or "",
            filename=filename,
        )


def _target(request: Request) -> SbomTarget:
    return SbomTarget(
        project_name=param(request, "projectName"),
        project_version=param(request, "projectVersion"),
        project_uuid=param(request, "project"),
        auto_create=parse_bool(param(request, "autoCreate")),
    )


@extend_schema(
    summary="Upload a CycloneDX SBOM (JSON or XML, raw body or multipart `bom`/`file`)",
    parameters=[
        OpenApiParameter("projectName", str),
        OpenApiParameter("projectVersion", str),
        OpenApiParameter("autoCreate", bool),
        OpenApiParameter("project", str, description="project version uuid instead of name"),
        OpenApiParameter("team", str, description="for people in several teams"),
        OpenApiParameter("X-Priority", int, location=OpenApiParameter.HEADER),
    ],
    request={"application/json": {}, "application/xml": {}, "multipart/form-data": {}},
    responses={202: None},
)
class SbomUploadApi(_SbomReceiver):
    """Store the SBOM as an ingest job and answer 202 with its status URL."""

    def post(self, request: Request) -> Response:
        body, filename = body_or_file(request, "bom", "file")
        job = self._submit(request, body=body, target=_target(request), filename=filename)
        return accepted(job)


_TOKEN = inline_serializer("BomToken", fields={"token": serializers.UUIDField()})
_DT_PUT = inline_serializer(
    "DependencyTrackBomSubmit",
    fields={
        "project": serializers.UUIDField(required=False),
        "projectName": serializers.CharField(required=False),
        "projectVersion": serializers.CharField(required=False),
        "autoCreate": serializers.BooleanField(required=False),
        "bom": serializers.CharField(help_text="the BOM, base64-encoded"),
    },
)
_DT_POST = inline_serializer(
    "DependencyTrackBomUpload",
    fields={
        "project": serializers.UUIDField(required=False),
        "projectName": serializers.CharField(required=False),
        "projectVersion": serializers.CharField(required=False),
        "autoCreate": serializers.BooleanField(required=False),
        "bom": serializers.FileField(),
    },
)


@extend_schema(
    summary="Dependency-Track compatible BOM upload (PUT JSON / POST multipart)",
    methods=["PUT"],
    request=_DT_PUT,
    responses={200: _TOKEN},
)
@extend_schema(methods=["POST"], request={"multipart/form-data": _DT_POST}, responses={200: _TOKEN})
class DependencyTrackBomApi(_SbomReceiver):
    """`PUT /api/v1/bom` and `POST /api/v1/bom` as Dependency-Track 4 speaks them: existing
    CI plugins and `cdxgen --server-url` work unchanged. Answers the job id as `token`."""

    def put(self, request: Request) -> Response:
        try:
            doc = orjson.loads(request.body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise UploadRefused(
                400, "Invalid request body", f"The body is not JSON: {exc}"
            ) from exc
        if not isinstance(doc, dict) or not doc.get("bom"):
            raise UploadRefused(400, "BOM required", 'The JSON body needs a base64 "bom" field.')
        try:
            body = base64.b64decode(doc["bom"], validate=False)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise UploadRefused(
                400, "The uploaded BOM is invalid", f"bom is not base64: {exc}"
            ) from exc
        target = SbomTarget(
            project_name=str(doc.get("projectName") or ""),
            project_version=str(doc.get("projectVersion") or ""),
            project_uuid=str(doc.get("project") or ""),
            auto_create=parse_bool(doc.get("autoCreate")),
        )
        job = self._submit(request, body=body, target=target, filename="")
        return Response({"token": str(job.pk)})

    def post(self, request: Request) -> Response:
        if not request.content_type.startswith("multipart/form-data"):
            raise UploadRefused(400, "BOM required", "Send the BOM as the multipart field `bom`.")
        body, filename = body_or_file(request, "bom")
        job = self._submit(request, body=body, target=_target(request), filename=filename)
        return Response({"token": str(job.pk)})


@extend_schema(
    summary="Dependency-Track compatible: is the upload with this token still processing?",
    responses={
        200: inline_serializer("BomProcessing", fields={"processing": serializers.BooleanField()})
    },
)
class DependencyTrackTokenApi(APIView):
    required_scope = (Scope.READ, Scope.SBOM_WRITE)

    def get(self, request: Request, token: str) -> Response:
        job: IngestJob = job_get(principal=principal_for_request(request), job_id=token)
        return Response({"processing": not job.is_finished})


urlpatterns = [
    path("api/v1/sboms", SbomUploadApi.as_view(), name="api-sbom-upload"),
    path("api/v1/bom", DependencyTrackBomApi.as_view(), name="api-dt-bom"),
    path(
        "api/v1/bom/token/<str:token>", DependencyTrackTokenApi.as_view(), name="api-dt-bom-token"
    ),
    path(
        "api/v1/event/token/<str:token>",
        DependencyTrackTokenApi.as_view(),
        name="api-dt-event-token",
    ),
]
