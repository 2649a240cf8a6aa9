"""VEX receivers: `POST /api/v1/vex` (raw body or multipart `vex`) and Dependency-Track's
`PUT /api/v1/vex` (JSON with the document base64-encoded in `vex`). Scope `triage`.

A document is stored as an ingest job (kind "vex") before anything is answered, and its
statements are applied in one transaction by the job. `POST` runs a document of up to
TRUSTRANK_VEX_SYNC_MAX_STATEMENTS statements within the request (5,000 statements took
6.4 s on a loaded 2-core machine, tests/vex/test_vex_volume.py) and answers 200 with what
it did; a bigger one, or one a worker took first, is answered 202 with the job's status
URL. `PUT` answers `{"token": …}` at once, as Dependency-Track does; the token is the job
id, pollable at `/api/v1/event/token/{token}` (`/api/v1/jobs/{token}` has the counts).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any

import orjson
from django.conf import settings
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.apis.sbom import target_checked
from ingest.models import IngestJob, JobStatus
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
from ingest.services import job_run
from ingest.submit import SbomTarget, vex_submit
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.lib.api import problem

_VEX_CONTENT_TYPES = frozenset(
    {
        "", "application/json", "text/json", "application/vnd.cyclonedx+json",
        "application/xml", "text/xml", "application/vnd.cyclonedx+xml",
        "application/openvex+json", "application/octet-stream", "application/gzip",
        "application/x-gzip", "text/plain", "multipart/form-data",
        "application/x-www-form-urlencoded",
    }
)
# How long a POST waits for a worker that claimed its job first.
_WAIT_FOR_WORKER_SECONDS = 10.0


def _media_type_check(request: Request, *, allowed: frozenset[str]) -> None:
    media_type = (request.content_type or "").split(";", 1)[0].strip().lower()
    if media_type not in allowed:
        raise UploadRefused(
            415, "Unsupported media type",
            f"A VEX document cannot be sent as {media_type!r}; use one of "
            + ", ".join(sorted(t for t in allowed if t)) + ".",
        )


def _decoded(doc: dict[str, Any]) -> bytes:
    raw = doc.get("vex")
    if not raw:
        raise UploadRefused(400, "VEX required", 'The JSON body needs a base64 "vex" field.')
    if not isinstance(raw, str):
        raise UploadRefused(400, "Invalid field", "vex must be a base64 string.")
    try:
        return base64.b64decode(raw, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise UploadRefused(
            400, "The VEX document is invalid", f"vex is not base64: {exc}"
        ) from exc


def _wrapped(body: bytes) -> dict[str, Any] | None:
    """Dependency-Track's JSON form ({"project"…, "vex": base64}), else None (a document)."""
    if body.lstrip()[:1] != b"{" or b'"vex"' not in body:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(doc, dict) and "vex" in doc and not {"@context", "bomFormat"} & doc.keys():
        return doc
    return None


def _target_of(doc: dict[str, Any]) -> SbomTarget:
    return target_checked(
        name=doc.get("projectName"), version=doc.get("projectVersion"),
        uuid=doc.get("project"), auto_create=None,
    )


def _target(request: Request) -> SbomTarget:
    return target_checked(
        name=param(request, "projectName"), version=param(request, "projectVersion"),
        uuid=param(request, "project"), auto_create=None,
    )


def _finished(job: IngestJob) -> IngestJob | None:
    job.refresh_from_db()
    return job if job.status in (JobStatus.DONE, JobStatus.FAILED) else None


def _outcome(job: IngestJob) -> Response:
    """What a POST answers once its job has run (or is still running elsewhere)."""
    done = _finished(job)
    deadline = time.monotonic() + _WAIT_FOR_WORKER_SECONDS
    while done is None and time.monotonic() < deadline:
        time.sleep(0.1)
        done = _finished(job)
    if done is None:
        return accepted(job)
    if done.status == JobStatus.FAILED:
        # Nothing was applied (the job is one transaction); the document is kept on the job.
        response = problem(400, "The VEX document cannot be applied", done.error)
        response["Location"] = f"/api/v1/jobs/{job.pk}"
        return response
    url = f"/api/v1/jobs/{job.pk}"
    return Response(
        {
            "id": str(job.pk), "token": str(job.pk), "status": done.status, "status_url": url,
            **(done.counts or {}), **(done.result or {}),
        },
        headers={"Location": url},
    )


_RESULT = inline_serializer(
    "VexApplied",
    fields={
        "id": serializers.UUIDField(),
        "token": serializers.UUIDField(),
        "status": serializers.CharField(),
        "status_url": serializers.CharField(),
        "format": serializers.ChoiceField(choices=["cyclonedx", "openvex"]),
        "statements": serializers.IntegerField(),
        "applied": serializers.IntegerField(help_text="findings whose triage changed"),
        "unchanged": serializers.IntegerField(help_text="findings that already said so"),
        "unmatched": serializers.IntegerField(help_text="statements naming no finding"),
        "unmatched_statements": serializers.ListField(
            child=serializers.DictField(), help_text="the first 100 unmatched statements"
        ),
        "project_version_uuid": serializers.UUIDField(),
    },
)
_TOKEN = inline_serializer("VexToken", fields={"token": serializers.UUIDField()})
_DT_PUT = inline_serializer(
    "DependencyTrackVexSubmit",
    fields={
        "project": serializers.UUIDField(required=False),
        "projectName": serializers.CharField(required=False),
        "projectVersion": serializers.CharField(required=False),
        "vex": serializers.CharField(help_text="the VEX document, base64-encoded"),
    },
)
_POST_FORM = inline_serializer(
    "VexUpload",
    fields={
        "project": serializers.UUIDField(required=False),
        "projectName": serializers.CharField(required=False),
        "projectVersion": serializers.CharField(required=False),
        "vex": serializers.FileField(),
    },
)


@extend_schema(
    methods=["POST"],
    summary="Upload a VEX document (CycloneDX VEX JSON/XML or OpenVEX 0.2): its statements "
    "become the triage of the project version's findings",
    parameters=[
        OpenApiParameter("projectName", str),
        OpenApiParameter("projectVersion", str),
        OpenApiParameter("project", str, description="project version uuid instead of name"),
        OpenApiParameter("team", str, description="for people in several teams"),
        OpenApiParameter("X-Priority", int, location=OpenApiParameter.HEADER),
    ],
    request={
        "application/json": {}, "application/openvex+json": {},
        "application/vnd.cyclonedx+json": {}, "application/xml": {},
        "multipart/form-data": _POST_FORM,
    },
    responses={200: _RESULT, 202: None},
)
@extend_schema(
    methods=["PUT"],
    summary="Dependency-Track compatible VEX upload (JSON, base64 `vex`)",
    request=_DT_PUT,
    responses={200: _TOKEN},
)
class VexUploadApi(ReceiverMixin, APIView):
    parser_classes = [MultiPartParser, FormParser, RawBodyParser]
    required_scope = Scope.TRIAGE

    def _submit(
        self, request: Request, *, body: bytes, target: SbomTarget, filename: str
    ) -> IngestJob:
        principal = principal_for_request(request)
        team = team_for_write(principal=principal, scope=Scope.TRIAGE, what="VEX documents",
                              team_hint=param(request, "team"))
        return vex_submit(
            principal=principal, team=team, body=body,
            content_encoding=request.headers.get("Content-Encoding", ""), target=target,
            priority=priority_from(request), content_type=request.content_type or "",
            filename=filename,
        )

    def post(self, request: Request) -> Response:
        _media_type_check(request, allowed=_VEX_CONTENT_TYPES)
        body, filename = body_or_file(request, "vex", "file")
        wrapped = _wrapped(body) if not filename else None
        if wrapped is not None:
            body, target = _decoded(wrapped), _target_of(wrapped)
        else:
            target = _target(request)
        job = self._submit(request, body=body, target=target, filename=filename)
        if int(job.params.get("statements", 0)) > settings.TRUSTRANK_VEX_SYNC_MAX_STATEMENTS:
            return accepted(job)
        # Claimed like any job (a worker that gets its message finds it taken); if this
        # request dies midway the lease lapses and the sweep gives it to a worker.
        job_run(job_id=str(job.pk))
        return _outcome(job)

    def put(self, request: Request) -> Response:
        _media_type_check(request, allowed=frozenset({"", "application/json", "text/plain"}))
        try:
            doc = orjson.loads(request.body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise UploadRefused(
                400, "Invalid request body", f"The body is not JSON: {exc}"
            ) from exc
        if not isinstance(doc, dict):
            raise UploadRefused(400, "VEX required", 'The JSON body needs a base64 "vex" field.')
        job = self._submit(request, body=_decoded(doc), target=_target_of(doc), filename="")
        return Response({"token": str(job.pk)})


urlpatterns = [
    path("api/v1/vex", VexUploadApi.as_view(), name="api-vex-upload"),
]
