"""OpenAPI for the receivers that are plain Django views (`/v1/traces`, `/v1/metrics`,
`/api/v1/write`). drf-spectacular documents DRF views only; these stay plain views on purpose
(their bodies are OTLP or remote-write protobuf, and a collector sending many requests a
second should not pay for DRF's content negotiation). Each carries its operation through
`openapi_operation`, and `plain_receivers_document`, a drf-spectacular postprocessing hook
(SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]), adds them to the schema.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.urls import URLPattern, URLResolver, get_resolver

View = TypeVar("View", bound=Callable[..., Any])

SECURITY: list[dict[str, list[str]]] = [{"ApiKey": []}]
BINARY = {"type": "string", "format": "binary"}
GZIP_HEADER = {
    "in": "header",
    "name": "Content-Encoding",
    "schema": {"type": "string", "enum": ["gzip", "identity"]},
    "description": "gzip bodies are inflated (up to TRUSTRANK_MAX_UPLOAD_BYTES).",
}
PRIORITY_HEADER = {
    "in": "header",
    "name": "X-Priority",
    "schema": {"type": "integer"},
    "description": "ingest queue priority of the job this request creates",
}


def openapi_operation(**operation: Any) -> Callable[[View], View]:
    """Attach an OpenAPI operation object (the POST of its route) to a plain Django view."""

    def attach(view: View) -> View:
        view.openapi_operation = operation  # type: ignore[attr-defined]
        return view

    return attach


def _routes(
    patterns: list[URLPattern | URLResolver], prefix: str = ""
) -> Iterator[tuple[str, Callable[..., Any]]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry.callback


def plain_receivers_document(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: add every view carrying `openapi_operation`."""
    paths = result.setdefault("paths", {})
    for route, view in _routes(get_resolver().url_patterns):
        operation = getattr(view, "openapi_operation", None)
        if operation is None:
            continue
        paths.setdefault("/" + route, {})["post"] = {"security": SECURITY, **operation}
    result["paths"] = dict(sorted(paths.items()))
    return result


def _otlp_operation(*, signal: str, message: str, scope: str, summary: str) -> dict[str, Any]:
    request = f"opentelemetry.proto.collector.{signal}.v1.Export{message}ServiceRequest"
    response = f"Export{message}ServiceResponse"
    status = "google.rpc.Status, in the request's encoding"
    return {
        "operationId": f"otlp_{signal}_export",
        "summary": summary,
        "description": (
            f"OTLP/HTTP as the OpenTelemetry exporters speak it (scope `{scope}`). The body is "
            f"an {request}, binary protobuf or OTLP JSON; the answer is an {response} "
            "(partial success names what was rejected) in the same encoding. The batch is "
            "stored as an ingest job before the answer."
        ),
        "tags": ["receivers"],
        "parameters": [GZIP_HEADER, PRIORITY_HEADER],
        "requestBody": {
            "required": True,
            "content": {
                "application/x-protobuf": {
                    "schema": {**BINARY, "description": f"{request}, binary protobuf"}
                },
                "application/json": {
                    "schema": {"type": "object", "description": f"{request}, OTLP JSON"}
                },
            },
        },
        "responses": {
            "200": {
                "description": f"Accepted ({response}; rejected items, if any, with a message)",
                "content": {"application/x-protobuf": {"schema": BINARY},
                            "application/json": {"schema": {"type": "object"}}},
            },
            "400": {"description": f"The body cannot be decoded ({status})"},
            "401": {"description": f"No or an invalid API key ({status})"},
            "403": {"description": f"The key lacks the `{scope}` scope ({status})"},
            "413": {"description": "The body is larger than the upload limit (problem+json)"},
            "415": {"description": "Content-Type or Content-Encoding not supported "
                                   "(problem+json)"},
            "429": {"description": f"The ingest queue is deep; see Retry-After ({status})"},
        },
    }


TRACES_OPERATION = _otlp_operation(
    signal="trace", message="Trace", scope="traces:write",
    summary="Export OTLP traces (OTLP/HTTP, protobuf or JSON)",
)
METRICS_OPERATION = _otlp_operation(
    signal="metrics", message="Metrics", scope="metrics:write",
    summary="Export OTLP metrics (OTLP/HTTP, protobuf or JSON)",
)
METRICS_OPERATION["parameters"] = [
    *METRICS_OPERATION["parameters"],
    {"in": "query", "name": "cluster", "schema": {"type": "string"},
     "description": "cluster of resources that carry no k8s.cluster.name"},
]

REMOTE_WRITE_OPERATION: dict[str, Any] = {
    "operationId": "prometheus_remote_write",
    "summary": "Prometheus remote write 1.0 (snappy-compressed protobuf)",
    "description": (
        "Prometheus `remote_write` endpoint (scope `metrics:write`). The body is a "
        "prometheus.WriteRequest, protobuf, snappy block-compressed (Content-Encoding: snappy). "
        "204 when stored; answers are plain text, as Prometheus logs them. Prometheus retries "
        "5xx and 429 and drops a batch on any other 4xx."
    ),
    "tags": ["receivers"],
    "parameters": [
        {"in": "header", "name": "Content-Encoding", "required": True,
         "schema": {"type": "string", "enum": ["snappy"]}},
        {"in": "header", "name": "X-Prometheus-Remote-Write-Version",
         "schema": {"type": "string", "example": "0.1.0"}},
        {"in": "query", "name": "cluster", "schema": {"type": "string"},
         "description": "cluster of series without the cluster label"},
        {"in": "query", "name": "cluster_label", "schema": {"type": "string", "default": "cluster"},
         "description": "the label that names a series' cluster"},
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/x-protobuf": {
                "schema": {**BINARY,
                           "description": "prometheus.WriteRequest, protobuf, snappy-compressed"}
            }
        },
    },
    "responses": {
        "204": {"description": "Stored as an ingest job"},
        "400": {"description": "The body can never be used (text/plain)"},
        "401": {"description": "No or an invalid API key (text/plain)"},
        "403": {"description": "The key lacks the `metrics:write` scope (text/plain)"},
        "413": {"description": "The body is larger than the upload limit (text/plain)"},
        "415": {"description": "Not snappy-compressed (text/plain)"},
        "429": {"description": "The ingest queue is deep; see Retry-After (text/plain)"},
    },
}
