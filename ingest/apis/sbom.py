"""SBOM receivers: TrustRank's own endpoint and the Dependency-Track compatible ones."""

from __future__ import annotations

import base64
import binascii
import uuid as uuid_module
from dataclasses import replace
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
from ingest.selectors import job_list
from ingest.submit import SbomTarget, parse_bool, sbom_submit
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.inventory.dt_selectors import sbom_analysis_pending
from trustrank.inventory.models import Project, ProjectVersion
from trustrank.lib.api import problem
from trustrank.lib.numbers import int_or_none

# What an SBOM may arrive as: CycloneDX JSON or XML under their generic or vendor types, SPDX
# JSON (2.2/2.3, or 3.0.1 JSON-LD), a form upload, or bytes whose type the client did not know
# (the parser decides: JSON that is an SPDX document goes to the SPDX parser).
_SBOM_CONTENT_TYPES = frozenset(
    {
        "",
        "application/json",
        "text/json",
        "application/vnd.cyclonedx+json",
        "application/xml",
        "text/xml",
        "application/vnd.cyclonedx+xml",
        "application/spdx+json",
        "application/octet-stream",
        "application/gzip",
        "application/x-gzip",
        "text/plain",
        "multipart/form-data",
        "application/x-www-form-urlencoded",
    }
)


def _content_type_check(request: Request, *, allowed: frozenset[str]) -> None:
    media_type = (request.content_type or "").split(";", 1)[0].strip().lower()
    if media_type not in allowed:
        raise UploadRefused(
            415,
            "Unsupported media type",
            f"An SBOM cannot be sent as {media_type!r}; use one of "
            + ", ".join(sorted(t for t in allowed if t))
            + ".",
        )


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


# Column limits of the project name and version: a longer value would pass here and fail in
# the worker after the 202.
_TEXT_LIMITS = {
    "projectName": Project._meta.get_field("name").max_length,
    "projectVersion": ProjectVersion._meta.get_field("version").max_length,
}


def target_checked(
    *, name: object, version: object, uuid: object, auto_create: object
) -> SbomTarget:
    """The upload's target with JSON types, lengths and the uuid checked: a wrong type is
    refused by name instead of being stored as its Python spelling."""
    values: dict[str, str] = {}
    for field, value in (("projectName", name), ("projectVersion", version), ("project", uuid)):
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise UploadRefused(
                400, "Invalid field", f"{field} must be a string, not {type(value).__name__}."
            )
        if "\x00" in value:
            raise UploadRefused(400, "Invalid field", f"{field} contains a NUL byte.")
        limit = _TEXT_LIMITS.get(field)
        if limit is not None and len(value) > limit:
            raise UploadRefused(
                400, "Invalid field", f"{field} is longer than {limit} characters."
            )
        values[field] = value
    if values["project"]:
        try:
            values["project"] = str(uuid_module.UUID(values["project"]))
        except ValueError as exc:
            raise UploadRefused(
                400, "Invalid field", f"project must be a UUID, not {values['project']!r}."
            ) from exc
    if auto_create is not None and not isinstance(auto_create, bool | str):
        raise UploadRefused(
            400,
            "Invalid field",
            f"autoCreate must be a boolean or a string, not {type(auto_create).__name__}.",
        )
    return SbomTarget(
        project_name=values["projectName"],
        project_version=values["projectVersion"],
        project_uuid=values["project"],
        auto_create=parse_bool(auto_create),
    )


def _target(request: Request) -> SbomTarget:
    target = target_checked(
        name=param(request, "projectName"),
        version=param(request, "projectVersion"),
        uuid=param(request, "project"),
        auto_create=param(request, "autoCreate"),
    )
    where: dict[str, str] = {}
    for field, limit in (("environment", 120), ("service", 200), ("namespace", 120),
                         ("human_impact", 12)):
        value = param(request, field)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or "\x00" in value or len(value) > limit:
            raise UploadRefused(
                400, "Invalid field", f"{field} must be text of at most {limit} characters."
            )
        where[field] = value.strip()
    return replace(
        target,
        environment=where.get("environment", ""),
        service=where.get("service", ""),
        namespace=where.get("namespace", ""),
        human_impact=where.get("human_impact", ""),
    )


@extend_schema(
    summary=(
        "Upload an SBOM: CycloneDX (JSON or XML) or SPDX (2.2/2.3 JSON, 3.0.1 JSON-LD as "
        "`application/spdx+json`), raw body or multipart `bom`/`file`"
    ),
    parameters=[
        OpenApiParameter("projectName", str),
        OpenApiParameter("projectVersion", str),
        OpenApiParameter("autoCreate", bool),
        OpenApiParameter("project", str, description="project version uuid instead of name"),
        OpenApiParameter(
            "environment", str, description="with `service`: where this version runs"
        ),
        OpenApiParameter(
            "service", str, description="the service running it (records the deployment)"
        ),
        OpenApiParameter("namespace", str, description="the service's namespace, if any"),
        OpenApiParameter(
            "human_impact", str, description="low, medium (default), high or very high"
        ),
        OpenApiParameter("team", str, description="for people in several teams"),
        OpenApiParameter("X-Priority", int, location=OpenApiParameter.HEADER),
    ],
    request={
        "application/json": {},
        "application/xml": {},
        "application/spdx+json": {},
        "multipart/form-data": {},
    },
    responses={202: None},
)
class SbomUploadApi(_SbomReceiver):
    """Store the SBOM as an ingest job and answer 202 with its status URL."""

    def post(self, request: Request) -> Response:
        _content_type_check(request, allowed=_SBOM_CONTENT_TYPES)
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
        "bom": serializers.CharField(
            help_text="the BOM, base64-encoded: CycloneDX JSON/XML or SPDX JSON (2.2, 2.3, 3.0.1)"
        ),
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
        _content_type_check(request, allowed=frozenset({"", "application/json", "text/plain"}))
        try:
            doc = orjson.loads(request.body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise UploadRefused(
                400, "Invalid request body", f"The body is not JSON: {exc}"
            ) from exc
        if not isinstance(doc, dict) or not doc.get("bom"):
            raise UploadRefused(400, "BOM required", 'The JSON body needs a base64 "bom" field.')
        if not isinstance(doc["bom"], str):
            raise UploadRefused(400, "Invalid field", "bom must be a base64 string.")
        try:
            body = base64.b64decode(doc["bom"], validate=False)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise UploadRefused(
                400, "The uploaded BOM is invalid", f"bom is not base64: {exc}"
            ) from exc
        target = target_checked(
            name=doc.get("projectName"),
            version=doc.get("projectVersion"),
            uuid=doc.get("project"),
            auto_create=doc.get("autoCreate"),
        )
        job = self._submit(request, body=body, target=target, filename="")
        return Response({"token": str(job.pk)})

    def post(self, request: Request) -> Response:
        _content_type_check(request, allowed=frozenset({"multipart/form-data"}))
        body, filename = body_or_file(request, "bom")
        job = self._submit(request, body=body, target=_target(request), filename=filename)
        return Response({"token": str(job.pk)})


@extend_schema(
    summary="Dependency-Track compatible: is the upload with this token still processing?",
    description="True until the SBOM is stored and its vulnerabilities matched (findings and "
    "metrics then show it). As Dependency-Track answers: false for a token it does not "
    "know (another team's job included), 400 for one that is not a UUID.",
    responses={
        200: inline_serializer("BomProcessing", fields={"processing": serializers.BooleanField()})
    },
)
class DependencyTrackTokenApi(APIView):
    # `triage`: the token of a VEX upload (PUT /api/v1/vex) is polled here too.
    required_scope = (Scope.READ, Scope.SBOM_WRITE, Scope.TRIAGE)

    def get(self, request: Request, token: str) -> Response:
        try:
            key = uuid_module.UUID(token)
        except ValueError:
            return problem(400, "Invalid token", f"The token must be a UUID, not {token[:80]!r}.",
                           param="token")
        job: IngestJob | None = (
            job_list(principal=principal_for_request(request)).filter(pk=key).first()
        )
        if job is None:
            return Response({"processing": False})
        if not job.is_finished:
            return Response({"processing": True})
        # The job is done once the SBOM is stored and matched (one transaction); an SBOM
        # stored before the job matched too may still wait for its match, and a CI plugin
        # reads findings as soon as this says false.
        sbom_id = int_or_none((job.result or {}).get("sbom_id"), minimum=1)
        return Response({"processing": sbom_id is not None
                         and sbom_analysis_pending(sbom_id=sbom_id)})


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
