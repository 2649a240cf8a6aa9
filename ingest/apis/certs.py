"""Certificate and trust bundle receivers.

`GET|POST api/v1/certificates` share one path, so one view serves both methods: listing
needs `read`, uploading needs `certs:write`. Uploads are parsed completely before anything
is stored (they are small), so a bad certificate or a private key sent by mistake is
refused with 400 and never reaches the job table.
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.parsers import BaseParser, FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.models import IngestJob
from ingest.services import InvalidPriority, ingest_overloaded, priority_parse
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.identity import selectors
from trustrank.identity.filters import CertificateFilter
from trustrank.identity.models import Certificate
from trustrank.identity.serializers import CertificateSerializer, TrustBundleSerializer
from trustrank.identity.services import (
    UploadRefused,
    certificates_submit,
    team_for_write,
    trust_bundle_submit,
)
from trustrank.lib.api import problem


class RawBodyParser(BaseParser):
    """Leave PEM/DER/JSON bodies alone: the receivers read request.body themselves."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return {}


class Overloaded(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after


def _param(request: Request, name: str) -> str:
    return str(request.query_params.get(name) or request.POST.get(name) or "")


def _body(request: Request, *fields: str) -> tuple[bytes, str]:
    """The raw body, or the first uploaded file / text field of a multipart form."""
    if request.content_type.startswith(("multipart/form-data", "application/x-www-form")):
        for name in fields:
            upload = request.FILES.get(name)
            if upload is not None:
                return upload.read(), upload.name or ""
        for name in fields:
            text = request.POST.get(name)
            if text:
                return text.encode(), ""
        raise UploadRefused(
            400, "File required", f"Send the file in the multipart field `{fields[0]}`."
        )
    return request.body, ""


def _priority(request: Request) -> int:
    try:
        return priority_parse(request.headers.get("X-Priority"))
    except InvalidPriority as exc:
        raise UploadRefused(400, "Invalid X-Priority", str(exc)) from exc


def _accepted(job: IngestJob, **extra: Any) -> Response:
    url = f"/api/v1/jobs/{job.pk}"
    return Response(
        {"id": str(job.pk), "status": job.status, "status_url": url, **extra},
        status=202,
        headers={"Location": url},
    )


class _Receiver:
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in ("POST", "PUT"):
            retry_after = ingest_overloaded()
            if retry_after is not None:
                raise Overloaded(retry_after)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Overloaded):
            response = problem(
                503, "Ingest queue is full",
                f"Too many uploads are waiting; retry in {exc.retry_after} s.",
            )
            response["Retry-After"] = str(exc.retry_after)
            return response
        if isinstance(exc, UploadRefused):
            return problem(exc.status, exc.title, exc.detail)
        return super().handle_exception(exc)  # type: ignore[misc]


@extend_schema(
    parameters=[
        OpenApiParameter("environment", str, description="environment name (default 'default')"),
        OpenApiParameter("service", str, description="the service presenting the certificate"),
        OpenApiParameter("namespace", str, description="that service's Kubernetes namespace"),
        OpenApiParameter("observed", str, description="where the certificate was observed"),
        OpenApiParameter("team", str, description="for people in several teams"),
        OpenApiParameter("X-Priority", int, location=OpenApiParameter.HEADER),
    ],
)
class CertificatesApi(_Receiver, ListAPIView[Certificate]):
    """GET: certificates with SPIFFE ID, strength, expiry and chain status.
    POST: PEM (one or many, chains included) or DER certificate(s), raw or multipart `file`."""

    parser_classes = [MultiPartParser, FormParser, RawBodyParser]
    required_scopes = {"GET": Scope.READ, "POST": Scope.CERTS_WRITE}
    serializer_class = CertificateSerializer
    filterset_class = CertificateFilter

    def get_queryset(self) -> Any:
        return selectors.certificate_list(principal=principal_for_request(self.request))

    @extend_schema(
        summary="Upload certificates",
        request={
            "application/x-pem-file": {},
            "application/pkix-cert": {},
            "multipart/form-data": {},
        },
        responses={202: None},
    )
    def post(self, request: Request) -> Response:
        principal = principal_for_request(request)
        body, filename = _body(request, "file", "certificate")
        team = team_for_write(principal=principal, team_hint=_param(request, "team"))
        job = certificates_submit(
            principal=principal,
            team=team,
            body=body,
            environment=_param(request, "environment"),
            service=_param(request, "service"),
            namespace=_param(request, "namespace"),
            observed=_param(request, "observed"),
            priority=_priority(request),
            content_type=request.content_type or "",
            filename=filename,
        )
        return _accepted(job, certificates=job.params.get("certificates"))


@extend_schema(
    parameters=[
        OpenApiParameter("trust_domain", str, description="the trust domain this bundle serves"),
        OpenApiParameter("team", str, description="for people in several teams"),
    ],
)
class TrustBundleApi(_Receiver, APIView):
    """PUT: replace the environment's trust bundle (PEM CA certificates or a SPIFFE bundle
    JSON); every certificate in the environment is verified again. GET: the current one."""

    parser_classes = [MultiPartParser, FormParser, RawBodyParser]
    required_scopes = {"GET": Scope.READ, "PUT": Scope.CERTS_WRITE}

    @extend_schema(responses=TrustBundleSerializer)
    def get(self, request: Request, environment: str) -> Response:
        bundle = selectors.bundle_get(
            principal=principal_for_request(request), environment=environment
        )
        return Response(TrustBundleSerializer(bundle).data)

    @extend_schema(
        summary="Replace an environment's trust bundle",
        request={"application/x-pem-file": {}, "application/json": {}},
        responses={202: None},
    )
    def put(self, request: Request, environment: str) -> Response:
        principal = principal_for_request(request)
        body, filename = _body(request, "file", "bundle")
        team = team_for_write(principal=principal, team_hint=_param(request, "team"))
        job = trust_bundle_submit(
            principal=principal,
            team=team,
            body=body,
            environment=environment,
            trust_domain=_param(request, "trust_domain"),
            priority=_priority(request),
            content_type=request.content_type or "",
            filename=filename,
        )
        return _accepted(job, anchors=job.params.get("anchors"))


urlpatterns = [
    path("api/v1/certificates", CertificatesApi.as_view(), name="api-certificates"),
    path(
        "api/v1/environments/<str:environment>/trust-bundle",
        TrustBundleApi.as_view(),
        name="api-trust-bundle",
    ),
]
