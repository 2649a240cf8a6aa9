from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from trustrank.lib.api import problem_response


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
