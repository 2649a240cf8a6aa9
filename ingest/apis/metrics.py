"""Cluster telemetry receivers: OTLP/HTTP metrics, Prometheus remote write 1.0, text
scrapes and kubectl JSON. Each validates the body with its parser (so a bad body is a 4xx
and nothing is stored), stores it as a `telemetry` job and answers at once, as its protocol
expects: OTLP 200 with an ExportMetricsServiceResponse (partial success), remote write 204,
the REST ones 202 with the job's status URL.

Every point is checked before the answer (`metrics_limits`: time window, NUL, UTF-8,
lengths): bad points are dropped and counted, the good ones stored, and only a body with
nothing storable is refused whole (400). OTLP says what it dropped in `partial_success`;
remote write answers 200 with a plain-text note and the remote-write 2.0 header
`X-Prometheus-Remote-Write-Samples-Written` (1.0 has no partial answer; a 4xx would make
Prometheus drop the good samples too); the REST receivers name the rejected lines or
objects in their JSON answer.

Scope `metrics:write`; keys holding the earlier `telemetry:write` are accepted too.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.request import RawPostDataException
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest import services as ingest_services
from ingest.apis.schema import METRICS_OPERATION, REMOTE_WRITE_OPERATION, openapi_operation
from ingest.bodies import BodyTooLarge, BodyUndecodable, decode_body
from ingest.loaders.cluster import OBJECTS, OTLP, REMOTE_WRITE, SCRAPE, metrics_limits
from ingest.models import JobKind
from ingest.receivers import (
    RawBodyParser,
    ReceiverMixin,
    UploadRefused,
    accepted,
    param,
    priority_from,
)
from trustrank.accounts.auth import key_from_headers
from trustrank.accounts.models import ApiKey, Scope, Team
from trustrank.accounts.principal import Principal, principal_for_key, principal_for_request
from trustrank.accounts.services import api_key_authenticate_cached
from trustrank.cluster.services.objects import ClusterNameInvalid, cluster_name_clean
from trustrank.lib.api import problem, problem_response
from trustrank.parsers.kubernetes import KubernetesError, kubernetes_parse
from trustrank.parsers.otlp import media_type, status_encode
from trustrank.parsers.otlp_columns import columns_pack, otlp_metrics_check_columns
from trustrank.parsers.otlp_metrics_model import JSON, PROTOBUF, OtlpMetricsError
from trustrank.parsers.prometheus_text import (
    OPENMETRICS,
    TEXT,
    PrometheusTextError,
    prometheus_text_parse,
)
from trustrank.parsers.remote_write import RemoteWriteError, remote_write_parse

WRITE_SCOPES = (Scope.METRICS_WRITE, Scope.TELEMETRY_WRITE)
_RPC_INVALID_ARGUMENT, _RPC_UNAUTHENTICATED, _RPC_PERMISSION_DENIED = 3, 16, 7
_RPC_RESOURCE_EXHAUSTED = 8


def _may_write(principal: Principal, team_id: int) -> bool:
    return any(principal.can(scope, team_id) for scope in WRITE_SCOPES)


def _key(request: HttpRequest) -> tuple[ApiKey | None, str]:
    """The request's API key, or None with the reason to answer 401."""
    secret = key_from_headers(request.META)
    if not secret:
        return None, ("Authentication required: send the API key as "
                      "'Authorization: Bearer <key>' or 'X-Api-Key'.")
    api_key = api_key_authenticate_cached(secret=secret)
    if api_key is None:
        return None, "The API key is invalid or revoked."
    return api_key, ""


# --- OTLP/HTTP metrics ----------------------------------------------------------------------


def _otlp_error(encoding: str, status: int, rpc_code: int, message: str) -> HttpResponse:
    return HttpResponse(
        status_encode(encoding=encoding, code=rpc_code, message=message),
        status=status, content_type=encoding,
    )


def _otlp_response(*, encoding: str, rejected: int, message: str) -> bytes:
    if encoding == JSON:
        body: dict[str, Any] = {}
        if rejected or message:
            body["partialSuccess"] = {"rejectedDataPoints": str(rejected),
                                      "errorMessage": message}
        return orjson.dumps(body)
    response = ExportMetricsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_data_points = rejected
        response.partial_success.error_message = message
    return response.SerializeToString()


@openapi_operation(**METRICS_OPERATION)
@csrf_exempt
@require_POST
def metrics_export(request: HttpRequest) -> HttpResponse:
    """`POST /v1/metrics`: checks in the order a client can fix them (as `/v1/traces`)."""
    encoding = media_type(request.META.get("CONTENT_TYPE", ""))
    reply = encoding if encoding in (PROTOBUF, JSON) else JSON
    api_key, why = _key(request)
    if api_key is None:
        response = _otlp_error(reply, 401, _RPC_UNAUTHENTICATED, why)
        response["WWW-Authenticate"] = 'Bearer realm="trustrank"'
        return response
    principal = principal_for_key(api_key)
    if not _may_write(principal, api_key.team_id):
        return _otlp_error(reply, 403, _RPC_PERMISSION_DENIED,
                           "This API key lacks the 'metrics:write' scope.")
    if encoding not in (PROTOBUF, JSON):
        return problem_response(
            415, "Unsupported media type",
            f"Content-Type must be {PROTOBUF} or {JSON} (OTLP/HTTP), got "
            f"{request.META.get('CONTENT_TYPE', '')[:80]!r}.",
        )
    content_encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if content_encoding not in ("", "identity", "gzip", "x-gzip"):
        return problem_response(
            415, "Unsupported media type",
            f"Content-Encoding must be gzip or absent, got {content_encoding[:40]!r}.",
        )
    try:
        priority = ingest_services.priority_parse(request.META.get("HTTP_X_PRIORITY"))
    except ingest_services.InvalidPriority as exc:
        return _otlp_error(encoding, 400, _RPC_INVALID_ARGUMENT, str(exc))
    retry_after = ingest_services.ingest_overloaded()
    if retry_after is not None:
        response = _otlp_error(encoding, 429, _RPC_RESOURCE_EXHAUSTED,
                               f"The ingest queue is deep; retry in {retry_after} s.")
        response["Retry-After"] = str(retry_after)
        return response
    limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES
    gzipped = content_encoding in ("gzip", "x-gzip")
    try:
        raw = request.body
        body = decode_body(raw, content_encoding=content_encoding, limit=limit)
        # The counts of the parse; for a Collector's usual request also its columns,
        # stored packed beside the body so the worker need not read it again.
        checked, columns = otlp_metrics_check_columns(body=body, encoding=encoding,
                                                      limits=metrics_limits())
    except (RequestDataTooBig, BodyTooLarge):
        return problem_response(
            413, "Payload too large",
            f"The request body is larger than the configured limit of {limit} bytes "
            "(TRUSTRANK_MAX_UPLOAD_BYTES), after decompression.",
        )
    except (OtlpMetricsError, BodyUndecodable) as exc:
        return _otlp_error(encoding, 400, _RPC_INVALID_ARGUMENT, str(exc))
    fallback = request.GET.get("cluster", "")
    try:
        for name in checked.clusters:
            cluster_name_clean(name or fallback)
    except ClusterNameInvalid as exc:
        return _otlp_error(encoding, 400, _RPC_INVALID_ARGUMENT, str(exc))
    if checked.accepted_points:
        # Stored (payload and job row committed) before the exporter hears "success". A
        # gzip body (the Collector's otlphttp exporter compresses by default) is stored as
        # it came: a tenth of the bytes to write, and PostgreSQL does not compress it again
        # (TOAST compression of a 2 MB decoded body cost more than the parse).
        params: dict[str, Any] = {
            "format": OTLP, "encoding": "json" if encoding == JSON else "protobuf",
            "cluster": fallback, "points": checked.accepted_points,
        }
        if gzipped:
            params["content_encoding"] = "gzip"
        ingest_services.job_create(
            team=api_key.team, kind=JobKind.TELEMETRY, payload=raw if gzipped else body,
            principal=principal, params=params, priority=priority, content_type=encoding,
            prepared=None if columns is None else columns_pack(columns),
        )
    return HttpResponse(
        _otlp_response(encoding=encoding, rejected=checked.rejected_points,
                       message=checked.message()),
        status=200, content_type=encoding,
    )


# --- Prometheus remote write 1.0 ----------------------------------------------------------


def _plain(status: int, message: str) -> HttpResponse:
    # Prometheus logs the body of a refused write: plain text reads best there.
    return HttpResponse(message + "\n", status=status, content_type="text/plain")


@openapi_operation(**REMOTE_WRITE_OPERATION)
@csrf_exempt
@require_POST
def remote_write(request: HttpRequest) -> HttpResponse:
    """`POST /api/v1/write`. Prometheus retries 5xx and 429 and drops a batch on other
    4xx, so only a body that can never succeed gets a 400."""
    api_key, why = _key(request)
    if api_key is None:
        response = _plain(401, why)
        response["WWW-Authenticate"] = 'Bearer realm="trustrank"'
        return response
    principal = principal_for_key(api_key)
    if not _may_write(principal, api_key.team_id):
        return _plain(403, "This API key lacks the 'metrics:write' scope.")
    content_encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if content_encoding != "snappy":
        return _plain(415, "Remote write bodies must be snappy-compressed protobuf "
                           f"(Content-Encoding: snappy), got {content_encoding[:40]!r}.")
    retry_after = ingest_services.ingest_overloaded()
    if retry_after is not None:
        response = _plain(429, f"The ingest queue is deep; retry in {retry_after} s.")
        response["Retry-After"] = str(retry_after)
        return response
    try:
        body = request.body
        written = remote_write_parse(body=body, now_ms=int(time.time() * 1000),
                                     limits=metrics_limits())
    except RequestDataTooBig:
        return _plain(413, "The request body is larger than the configured limit "
                           f"of {settings.TRUSTRANK_MAX_UPLOAD_BYTES} bytes.")
    except RemoteWriteError as exc:
        return _plain(400, f"Unusable remote write request: {exc}")
    if written.wholly_bad:
        return _plain(400, f"Unusable remote write request: {written.message()}")
    label = request.GET.get("cluster_label", "cluster")
    fallback = request.GET.get("cluster", "")
    # Series of a cluster name that cannot be one are dropped like any bad sample; the
    # request is refused only when no series is left.
    bad_names: dict[str, str] = {}
    for name in {item.label(label) or fallback for item in written.series}:
        try:
            cluster_name_clean(name)
        except ClusterNameInvalid as exc:
            bad_names[name] = str(exc)
    dropped = sum(len(item.timestamps_ms) for item in written.series
                  if (item.label(label) or fallback) in bad_names)
    accepted_samples = written.accepted_samples - dropped
    if bad_names and not accepted_samples:
        return _plain(400, next(iter(bad_names.values())))
    if accepted_samples:
        ingest_services.job_create(
            team=api_key.team, kind=JobKind.TELEMETRY, payload=body, principal=principal,
            params={"format": REMOTE_WRITE, "cluster": fallback, "cluster_label": label,
                    "samples": accepted_samples},
            content_type="application/x-protobuf",
        )
    rejected = written.rejected_samples + dropped
    if rejected:
        notes = [written.message()] if written.rejected_samples else []
        notes += [f"{dropped} samples of an unusable cluster name dropped: "
                  + next(iter(bad_names.values()))] if dropped else []
        response = _plain(200, f"Stored {accepted_samples} of {written.total_samples} "
                               "samples. " + " ".join(notes))
    else:
        response = HttpResponse(status=204)
    response["X-Prometheus-Remote-Write-Samples-Written"] = str(accepted_samples)
    response["X-Prometheus-Remote-Write-Histograms-Written"] = "0"
    response["X-Prometheus-Remote-Write-Exemplars-Written"] = "0"
    return response


# --- REST: text scrapes and Kubernetes objects ----------------------------------------------


class _ClusterReceiver(ReceiverMixin, APIView):
    parser_classes = [RawBodyParser]
    required_scope = WRITE_SCOPES

    def _team(self, request: Request) -> tuple[Principal, Team]:
        principal = principal_for_request(request)
        if principal.api_key is not None:
            if not _may_write(principal, principal.api_key.team_id):
                raise UploadRefused(403, "Forbidden", "This key lacks the 'metrics:write' scope.")
            return principal, principal.api_key.team
        allowed = sorted({t for s in WRITE_SCOPES for t in principal.teams_with(s)})
        hint = param(request, "team")
        teams = Team.objects.filter(pk__in=allowed)
        if hint:
            teams = teams.filter(name=hint)
        found = list(teams[:2])
        if len(found) != 1:
            raise UploadRefused(
                403 if not found else 400, "Team required",
                "Name one team you may write metrics to with the `team` parameter.",
            )
        return principal, found[0]

    def _body(self, request: Request) -> bytes:
        try:
            raw = request.body
        except RawPostDataException as exc:
            # A form body was read as form fields before the view: it is no metrics payload.
            raise UploadRefused(
                415, "Unsupported media type",
                f"{request.content_type or 'this media type'} is not a metrics payload.",
            ) from exc
        try:
            return decode_body(
                raw, content_encoding=request.headers.get("Content-Encoding", ""),
                limit=settings.TRUSTRANK_MAX_UPLOAD_BYTES,
            )
        except (RequestDataTooBig, BodyTooLarge) as exc:
            raise UploadRefused(413, "Payload too large", "The body is over the upload "
                                "limit (TRUSTRANK_MAX_UPLOAD_BYTES).") from exc
        except BodyUndecodable as exc:
            raise UploadRefused(400, "Invalid request body", str(exc)) from exc


def _cluster(name: str) -> str:
    try:
        return cluster_name_clean(name)
    except ClusterNameInvalid as exc:
        raise UploadRefused(400, "Invalid cluster name", str(exc)) from exc


class ClusterScrapeUploadApi(_ClusterReceiver):
    """`POST /api/v1/clusters/<cluster>/metrics`: a Prometheus text or OpenMetrics scrape,
    as `curl` of an exporter returns it."""

    def post(self, request: Request, cluster: str) -> Response:
        principal, team = self._team(request)
        name = _cluster(cluster)
        body = self._body(request)
        kind = OPENMETRICS if (request.content_type or "").startswith(OPENMETRICS) else TEXT
        now_ms = int(time.time() * 1000)
        try:
            scrape = prometheus_text_parse(body=body, scraped_at_ms=now_ms, now_ms=now_ms,
                                           media_type=kind, limits=metrics_limits())
        except PrometheusTextError as exc:
            raise UploadRefused(400, "Unusable scrape", str(exc)) from exc
        rejected = [line.as_dict() for line in scrape.rejected]
        if not scrape.series:
            if scrape.rejected_samples:
                return problem(400, "Unusable scrape",
                               f"Every sample was rejected: {scrape.message()}",
                               rejected_samples=scrape.rejected_samples, rejected=rejected)
            raise UploadRefused(400, "Unusable scrape", "The body holds no samples.")
        job = ingest_services.job_create(
            team=team, kind=JobKind.TELEMETRY, payload=body, principal=principal,
            params={"format": SCRAPE, "cluster": name, "media_type": kind,
                    "series": len(scrape.series)},
            priority=priority_from(request), content_type=request.content_type or "",
        )
        return accepted(job, cluster=name, series=len(scrape.series),
                        samples=len(scrape.series), rejected_samples=scrape.rejected_samples,
                        rejected=rejected)


class ClusterObjectsUploadApi(_ClusterReceiver):
    """`POST /api/v1/clusters/<cluster>/objects`: `kubectl get pods,nodes,events,
    priorityclasses,services,ingresses,gateways,httproutes -A -o json` (a List, or one
    kind's list). Services of type LoadBalancer/NodePort, Ingresses and HTTPRoutes make the
    services they reach entry points from the internet."""

    def post(self, request: Request, cluster: str) -> Response:
        principal, team = self._team(request)
        name = _cluster(cluster)
        body = self._body(request)
        try:
            snapshot = kubernetes_parse(body=body)
        except KubernetesError as exc:
            raise UploadRefused(400, "Unusable Kubernetes objects", str(exc)) from exc
        counts = {"pods": len(snapshot.pods), "nodes": len(snapshot.nodes),
                  "events": len(snapshot.events),
                  "priority_classes": len(snapshot.priority_classes),
                  "services": len(snapshot.services), "ingresses": len(snapshot.ingresses),
                  "gateways": len(snapshot.gateways), "http_routes": len(snapshot.http_routes)}
        rejected = [item.as_dict() for item in snapshot.rejected]
        if not any(counts.values()):
            if rejected:
                return problem(400, "Unusable Kubernetes objects",
                               "Every object was rejected: " + "; ".join(
                                   f"{r['kind']} {r['name']}: {r['problem']}"
                                   for r in rejected[:5]),
                               rejected=rejected)
            raise UploadRefused(400, "Unusable Kubernetes objects",
                                "The body holds no pods, nodes, events, priority classes, "
                                "services, ingresses, gateways or HTTP routes.")
        job = ingest_services.job_create(
            team=team, kind=JobKind.TELEMETRY, payload=body, principal=principal,
            params={"format": OBJECTS, "cluster": name, **counts},
            priority=priority_from(request), content_type=request.content_type or "",
        )
        return accepted(job, cluster=name, **counts, rejected=rejected)


urlpatterns = [
    path("v1/metrics", metrics_export, name="otlp-metrics"),
    path("api/v1/write", remote_write, name="remote-write"),
    path("api/v1/clusters/<str:cluster>/metrics", ClusterScrapeUploadApi.as_view(),
         name="cluster-metrics-upload"),
    path("api/v1/clusters/<str:cluster>/objects", ClusterObjectsUploadApi.as_view(),
         name="cluster-objects-upload"),
]
