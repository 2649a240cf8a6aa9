"""Certificate and trust bundle receivers.

`GET|POST api/v1/certificates` share one path, so one view serves both methods: listing
needs `read`, uploading needs `certs:write`. Uploads are parsed completely before anything
is stored (they are small), so a bad certificate or a private key sent by mistake is
refused with 400 and never reaches the job table.
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.receivers import (
    RawBodyParser,
    ReceiverMixin,
    accepted,
    body_or_file,
    param,
    priority_from,
    team_for_write,
)
from ingest.submit import certificates_submit, trust_bundle_submit
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.identity import selectors
from trustrank.identity.filters import CertificateFilterSet
from trustrank.identity.models import Certificate
from trustrank.identity.serializers import CertificateSerializer, TrustBundleSerializer


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
class CertificatesApi(ReceiverMixin, ListAPIView[Certificate]):
    """GET: certificates with SPIFFE ID, strength, expiry and chain status.
    POST: PEM (one or many, chains included) or DER certificate(s), raw or multipart `file`."""

    parser_classes = [MultiPartParser, FormParser, RawBodyParser]
    required_scopes = {"GET": Scope.READ, "POST": Scope.CERTS_WRITE}
    serializer_class = CertificateSerializer
    filterset_class = CertificateFilterSet

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
        body, filename = body_or_file(request, "file", "certificate")
        team = team_for_write(
            principal=principal,
            scope=Scope.CERTS_WRITE,
            what="certificates",
            team_hint=param(request, "team"),
        )
        job = certificates_submit(
            principal=principal,
            team=team,
            body=body,
            environment=param(request, "environment"),
            service=param(request, "service"),
            namespace=param(request, "namespace"),
            observed=param(request, "observed"),
            priority=priority_from(request),
            content_type=request.content_type or "",
            filename=filename,
        )
        return accepted(job, certificates=job.params.get("certificates"))


_BUNDLE_ACCEPTED = inline_serializer(
    "TrustBundleAccepted",
    fields={
        "id": serializers.UUIDField(),
        "token": serializers.UUIDField(),
        "status": serializers.CharField(),
        "status_url": serializers.CharField(),
        "anchors": serializers.IntegerField(),
        "trust_domains": serializers.ListField(child=serializers.CharField()),
        # E.g. a bundle naming no trust domain: accepted, but every SPIFFE certificate in the
        # environment will count as from a foreign trust domain.
        "warnings": serializers.ListField(child=serializers.CharField()),
    },
)


@extend_schema(
    parameters=[
        OpenApiParameter("trust_domain", str, description="the trust domain this bundle serves"),
        OpenApiParameter("team", str, description="for people in several teams"),
    ],
)
class TrustBundleApi(ReceiverMixin, APIView):
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
        responses={202: _BUNDLE_ACCEPTED},
    )
    def put(self, request: Request, environment: str) -> Response:
        principal = principal_for_request(request)
        body, filename = body_or_file(request, "file", "bundle")
        team = team_for_write(
            principal=principal,
            scope=Scope.CERTS_WRITE,
            what="certificates",
            team_hint=param(request, "team"),
        )
        job = trust_bundle_submit(
            principal=principal,
            team=team,
            body=body,
            environment=environment,
            trust_domain=param(request, "trust_domain"),
            priority=priority_from(request),
            content_type=request.content_type or "",
            filename=filename,
        )
        return accepted(
            job,
            anchors=job.params.get("anchors"),
            trust_domains=job.params.get("trust_domains", []),
            warnings=job.params.get("warnings", []),
        )


urlpatterns = [
    path("api/v1/certificates", CertificatesApi.as_view(), name="api-certificates"),
    path(
        "api/v1/environments/<str:environment>/trust-bundle",
        TrustBundleApi.as_view(),
        name="api-trust-bundle",
    ),
]
