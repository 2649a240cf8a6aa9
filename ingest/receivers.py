"""Plumbing shared by the REST receivers: body reading, the team a write goes to, refusals
as RFC 9457 problems, `X-Priority`, and back-pressure (design formula 6)."""

from __future__ import annotations

from typing import Any

from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from ingest.errors import SubmitRefused
from ingest.models import IngestJob
from ingest.services import InvalidPriority, ingest_overloaded, priority_parse
from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload
from trustrank.lib.api import problem


class UploadRefused(Exception):
    """A receiver answers this with a problem document; nothing has been stored."""

    def __init__(
        self, status: int, title: str, detail: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail
        self.headers = headers or {}


class RawBodyParser(BaseParser):
    """Leave non-form bodies alone: the receivers read request.body themselves."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return {}


# How a receiver answers a SubmitRefused.
SUBMIT_STATUS = {
    SubmitRefused.INVALID: 400,
    SubmitRefused.FORBIDDEN: 403,
    SubmitRefused.NOT_FOUND: 404,
    SubmitRefused.TOO_LARGE: 413,
}


def team_for_write(*, principal: Principal, scope: str, what: str, team_hint: str = "") -> Team:
    """The team an upload goes to (accounts.selectors.team_for_upload), refusals as problems."""
    try:
        return team_for_upload(principal=principal, scope=scope, what=what, team_hint=team_hint)
    except TeamNotAllowed as exc:
        raise UploadRefused(403, "Forbidden", str(exc)) from exc
    except TeamRequired as exc:
        raise UploadRefused(400, "Team required", str(exc)) from exc


def param(request: Request, name: str) -> str:
    """A query parameter, or the same-named form field of a multipart upload."""
    return str(request.query_params.get(name) or request.POST.get(name) or "")


def body_or_file(request: Request, *fields: str) -> tuple[bytes, str]:
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


def priority_from(request: Request) -> int:
    try:
        return priority_parse(request.headers.get("X-Priority"))
    except InvalidPriority as exc:
        raise UploadRefused(400, "Invalid X-Priority", str(exc)) from exc


def accepted(job: IngestJob, **extra: Any) -> Response:
    url = f"/api/v1/jobs/{job.pk}"
    return Response(
        {"id": str(job.pk), "token": str(job.pk), "status": job.status, "status_url": url, **extra},
        status=202,
        headers={"Location": url},
    )


class ReceiverMixin:
    """For APIViews that accept evidence: refuse writes with 503 + Retry-After while the
    ingest queue is past its soft limit, and render UploadRefused and SubmitRefused as problem
    documents."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        if request.method in ("POST", "PUT"):
            retry_after = ingest_overloaded()
            if retry_after is not None:
                raise UploadRefused(
                    503,
                    "Ingest queue is full",
                    f"Too many uploads are waiting; retry in {retry_after} s.",
                    headers={"Retry-After": str(retry_after)},
                )

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, SubmitRefused):
            return problem(SUBMIT_STATUS[exc.reason], exc.title, exc.detail)
        if isinstance(exc, UploadRefused):
            response = problem(exc.status, exc.title, exc.detail)
            for name, value in exc.headers.items():
                response[name] = value
            return response
        return super().handle_exception(exc)  # type: ignore[misc]
