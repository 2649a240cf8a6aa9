from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.dateparse import parse_datetime

from trustrank.lib.api import is_api_path, problem_response


class BodySizeLimitMiddleware:
    """Refuse an oversized body from its Content-Length, before any of it is read."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES
        declared = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(declared)
        except ValueError:
            length = 0
        if length > limit or request.META.get("trustrank.body_too_large"):
            return problem_response(
                413,
                "Payload too large",
                f"The request body is larger than the configured limit of {limit} bytes "
                "(TRUSTRANK_MAX_UPLOAD_BYTES).",
            )
        return self.get_response(request)


# Real-world UTC offsets run from -12:00 to +14:00; PostgreSQL refuses some beyond that and
# Python overflows converting e.g. 9999-12-31T23:00-14:00 to UTC: both were 500s.
MAX_UTC_OFFSET = timedelta(hours=14)
_DATETIME_LIKE = re.compile(r"^\s*[+-]?\d{4,}-\d{1,2}-\d{1,2}[T ]\d{1,2}:\d{1,2}")


class InputRefused(ValueError):
    """A request parameter no view can use; `name` says which."""

    def __init__(self, *, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


def text_check(*, name: str, value: str) -> None:
    """Text PostgreSQL cannot store or compare (a NUL byte) is refused wherever it comes from."""
    if "\x00" in value:
        raise InputRefused(name=name, reason="contains a NUL byte")


def datetime_check(*, name: str, value: str) -> None:
    """A date-time whose offset is beyond any real time zone, or that cannot be expressed in
    UTC, is refused before a filter hands it to the database."""
    if not _DATETIME_LIKE.match(value):
        return
    try:
        parsed = parse_datetime(value.strip())
    except ValueError as exc:
        raise InputRefused(name=name, reason=f"is not a valid date-time ({exc})") from exc
    if parsed is None or parsed.tzinfo is None:
        return
    offset = parsed.utcoffset() or timedelta(0)
    if abs(offset) > MAX_UTC_OFFSET:
        raise InputRefused(
            name=name, reason="has a time-zone offset outside -14:00..+14:00"
        )
    try:
        parsed.astimezone(UTC)
    except OverflowError as exc:
        raise InputRefused(name=name, reason="is out of the supported date range") from exc


# A NUL in a JSON string is always written `\u0000` (a raw control character is not JSON); an
# odd number of backslashes before `u0000` makes it an escape rather than literal text.
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000|\x00")


def _json_nul_name(value: Any, path: str = "") -> str | None:
    """Where in a parsed JSON document a NUL sits: `assignee`, `filter.q`, `ids[2]`."""
    if isinstance(value, str):
        return (path or "body") if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return name
            found = _json_nul_name(item, name)
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _json_nul_name(item, f"{path}[{i}]")
            if found:
                return found
    return None


def json_body_check(request: HttpRequest) -> None:
    """A JSON body with a NUL in any string is refused naming the field. Only bodies Django
    would read into memory anyway: a large upload is streamed by its receiver, untouched."""
    content_type = request.content_type or ""
    if not (content_type == "application/json" or content_type.endswith("+json")):
        return
    if request.META.get("HTTP_CONTENT_ENCODING", "identity").strip().lower() != "identity":
        return  # compressed: its receiver inflates and checks it (the raw bytes are not JSON)
    try:
        length = int(request.META.get("CONTENT_LENGTH") or "0")
    except ValueError:
        return
    if not 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return
    body = request.body
    if not _JSON_NUL.search(body):
        return
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InputRefused(name="body", reason="contains a NUL byte") from None
    name = _json_nul_name(document)
    if name:
        raise InputRefused(name=name, reason="contains a NUL byte")


def request_inputs_check(request: HttpRequest) -> None:
    """Every route's path, query and form fields, checked once before any view sees them."""
    text_check(name="URL path", value=request.path_info)
    for key, values in request.GET.lists():
        text_check(name="query parameter name", value=key)
        for value in values:
            text_check(name=key, value=value)
            datetime_check(name=key, value=value)
    if request.method == "POST" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        # Reading POST here parses the form once; DRF reuses the parsed form afterwards.
        for key, values in request.POST.lists():
            text_check(name="form field name", value=key)
            for value in values:
                text_check(name=key, value=value)
                datetime_check(name=key, value=value)
    if request.method in ("POST", "PUT", "PATCH") and not _is_ingest_body(request.path_info):
        json_body_check(request)


# Telemetry whose receivers read every item themselves and refuse only the bad ones (a
# batch with one bad pod, span or sample keeps the others), naming them in their answer.
_INGEST_BODIES = re.compile(
    r"^/(v1/(traces|metrics)|api/v1/(write|clusters/[^/]+/(objects|metrics)))/?$"
)


def _is_ingest_body(path: str) -> bool:
    return bool(_INGEST_BODIES.match(path))


class InputCheckMiddleware:
    """Answer 400 naming the parameter, instead of a 500 from deep in a view or the database:
    a problem document for the API and the receivers, a plain page for the site."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            request_inputs_check(request)
        except InputRefused as exc:
            detail = f"The {exc.name!r} parameter {exc.reason}."
            if exc.name in ("URL path", "query parameter name", "form field name"):
                detail = f"The {exc.name} {exc.reason}."
            if is_api_path(request.path_info):
                return problem_response(
                    400, "Invalid parameter", detail, parameter=exc.name, param=exc.name
                )
            return HttpResponseBadRequest(
                f"Bad request: {detail}", content_type="text/plain; charset=utf-8"
            )
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Send settings.TRUSTRANK_CSP on every response that has none: scripts only from our
    own origin and never inline, so markup someone smuggles into a page (an advisory's text,
    a component name) cannot run."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.TRUSTRANK_CSP
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
