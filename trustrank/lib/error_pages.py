"""The project's 404 and 500 handlers: a problem document (RFC 9457) under the API and the
receivers, where a client parses JSON, and Django's pages for the site."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from trustrank.lib.api import is_api_path, problem_response


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api_path(request.path_info):
        return problem_response(
            404, "Not found",
            f"No API resource at {request.path_info} (the routes are listed at /api/docs/).",
        )
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api_path(request.path_info):
        return problem_response(
            500, "Server error",
            "The server failed to answer this request; it was logged. Nothing was stored.",
        )
    return defaults.server_error(request)
