"""Shared REST plumbing: pagination with a total count, RFC 9457 problem responses."""

from __future__ import annotations

from typing import Any

import orjson
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

PROBLEM_CONTENT_TYPE = "application/problem+json"


class Pagination(PageNumberPagination):
    """Page-number pagination; the body carries `count`, `next`, `previous`, `results`."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000


def is_api_path(path: str) -> bool:
    """Whether a request path is the API's or a receiver's: answered with problem documents."""
    return path.startswith(("/api/", "/v1/"))


def problem_response(status_code: int, title: str, detail: str, **extra: Any) -> HttpResponse:
    body = {"type": "about:blank", "title": title, "status": status_code, "detail": detail}
    body.update(extra)
    return HttpResponse(orjson.dumps(body), status=status_code, content_type=PROBLEM_CONTENT_TYPE)


def problem(status_code: int, title: str, detail: str, **extra: Any) -> Response:
    body = {"type": "about:blank", "title": title, "status": status_code, "detail": detail}
    body.update(extra)
    return Response(body, status=status_code, content_type=PROBLEM_CONTENT_TYPE)


def jobs_busy_response(exc: Any) -> Response:
    response = problem(status.HTTP_429_TOO_MANY_REQUESTS, "Too many requests", str(exc),
                       retry_after=exc.retry_after)
    response["Retry-After"] = str(exc.retry_after)
    return response


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF errors as RFC 9457 problem documents, keeping DRF's field errors under `errors`.
    A job refused for back-pressure (JobsBusy) is a 429 with Retry-After."""
    from trustrank.jobs.errors import JobsBusy

    if isinstance(exc, JobsBusy):
        return jobs_busy_response(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    title = {
        status.HTTP_400_BAD_REQUEST: "Bad request",
        status.HTTP_401_UNAUTHORIZED: "Authentication required",
        status.HTTP_403_FORBIDDEN: "Forbidden",
        status.HTTP_404_NOT_FOUND: "Not found",
        status.HTTP_405_METHOD_NOT_ALLOWED: "Method not allowed",
        status.HTTP_413_REQUEST_ENTITY_TOO_LARGE: "Payload too large",
        status.HTTP_415_UNSUPPORTED_MEDIA_TYPE: "Unsupported media type",
    }.get(response.status_code, "Error")
    data = response.data
    # Django's Http404 / PermissionDenied reach here too (DRF answers them as NotFound /
    # PermissionDenied): their message is the problem's detail, not a field error.
    plain = (exceptions.APIException, Http404, PermissionDenied)
    if isinstance(exc, plain) and isinstance(data, dict) and "detail" in data:
        detail = str(data["detail"])
        errors = None
    else:
        detail = "The request has invalid fields."
        errors = data
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": response.status_code,
        "detail": detail,
    }
    param = getattr(exc, "param", None)
    if param:
        body["param"] = param
    if errors is not None:
        body["errors"] = errors
    response.data = body
    response.content_type = PROBLEM_CONTENT_TYPE
    return response
