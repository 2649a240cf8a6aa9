"""OTLP/HTTP trace receiver: `POST /v1/traces`, as the OpenTelemetry exporters speak it.

Plain Django view rather than DRF: the request and response bodies are OTLP protobuf or OTLP
JSON, not DRF's formats, and an exporter sending 20 requests a second should not pay for
content negotiation. The order of checks follows what a client can fix: credentials (401,
403), media type (415), queue depth (429 + Retry-After), size (413), body (400).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ingest import services as ingest_services
from ingest.apis.schema import TRACES_OPERATION, openapi_operation
from ingest.bodies import BodyTooLarge, BodyUndecodable, decode_body
from ingest.submit import traces_submit
from trustrank.accounts.auth import key_from_headers
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_key
from trustrank.accounts.services import api_key_authenticate_cached
from trustrank.lib.api import problem_response
from trustrank.parsers.otlp import (
    ENCODINGS,
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    media_type,
    otlp_validate,
    response_encode,
    status_encode,
)
from trustrank.runtime.services.aggregation import span_window

# google.rpc.Code values for the Status body of a failed request.
_RPC_INVALID_ARGUMENT, _RPC_UNAUTHENTICATED, _RPC_PERMISSION_DENIED = 3, 16, 7
_RPC_RESOURCE_EXHAUSTED, _RPC_UNAVAILABLE = 8, 14

def _error(encoding: str, status: int, rpc_code: int, message: str) -> HttpResponse:
    return HttpResponse(
        status_encode(encoding=encoding, code=rpc_code, message=message),
        status=status,
        content_type=encoding,
    )


@openapi_operation(**TRACES_OPERATION)
@csrf_exempt
@require_POST
def traces_export(request: HttpRequest) -> HttpResponse:
    encoding = media_type(request.META.get("CONTENT_TYPE", ""))
    reply_encoding = encoding if encoding in ENCODINGS else JSON

    secret = key_from_headers(request.META)
    if not secret:
        response = _error(
            reply_encoding, 401, _RPC_UNAUTHENTICATED,
            "Authentication required: send the API key as 'Authorization: Bearer <key>' "
            "or 'X-Api-Key'.",
        )
        response["WWW-Authenticate"] = 'Bearer realm="trustrank"'
        return response
    api_key = api_key_authenticate_cached(secret=secret)
    if api_key is None:
        response = _error(
            reply_encoding, 401, _RPC_UNAUTHENTICATED, "The API key is invalid or revoked."
        )
        response["WWW-Authenticate"] = 'Bearer realm="trustrank", error="invalid_token"'
        return response
    principal = principal_for_key(api_key)
    if not principal.can(Scope.TRACES_WRITE, api_key.team_id):
        return _error(
            reply_encoding, 403, _RPC_PERMISSION_DENIED,
            "This API key lacks the 'traces:write' scope.",
        )

    if encoding not in ENCODINGS:
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
        return _error(encoding, 400, _RPC_INVALID_ARGUMENT, str(exc))

    retry_after = ingest_services.ingest_overloaded()
    if retry_after is not None:
        response = _error(
            encoding, 429, _RPC_RESOURCE_EXHAUSTED,
            f"The ingest queue is deep; retry in {retry_after} s.",
        )
        response["Retry-After"] = str(retry_after)
        return response

    limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES
    try:
        # gzip is inflated with the upload limit as a cap: a gzip bomb stops at the limit.
        body = decode_body(request.body, content_encoding=content_encoding, limit=limit)
        decoded = otlp_validate(body, encoding=encoding, window=span_window(now=timezone.now()))
    except (RequestDataTooBig, BodyTooLarge):
        return problem_response(
            413, "Payload too large",
            f"The request body is larger than the configured limit of {limit} bytes "
            "(TRUSTRANK_MAX_UPLOAD_BYTES), after decompression.",
        )
    except (OtlpDecodeError, BodyUndecodable) as exc:
        return _error(encoding, 400, _RPC_INVALID_ARGUMENT, str(exc))

    if decoded.accepted_spans:
        # Stored (payload and job row committed) before the exporter hears "success".
        traces_submit(
            principal=principal,
            team=api_key.team,
            body=body,
            json_encoded=encoding == JSON,
            spans=decoded.accepted_spans,
            priority=priority,
            content_type=encoding,
        )
    return HttpResponse(
        response_encode(
            encoding=encoding,
            rejected_spans=decoded.rejected_spans,
            message=decoded.message(),
        ),
        status=200,
        content_type=encoding,
    )


urlpatterns = [path("v1/traces", traces_export, name="otlp-traces")]
