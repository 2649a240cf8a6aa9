"""Feed import receivers: POST /api/v1/feeds/{osv|kev|epss|nvd} with the raw file as the body
(OSV: one JSON record, a JSON array or a zip; KEV: the catalog JSON; EPSS: CSV or .csv.gz;
NVD: one NVD CVE API 2.0 page, JSON or gzip).
Feeds are reference data every team shares, so this needs the site-wide `feeds:write` scope,
which only an operator grants (`manage.py issue_api_key --scope feeds:write`): a team admin
must not be able to withdraw advisories or replace the KEV catalog for every other team."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ingest.receivers import (
    RawBodyParser,
    ReceiverMixin,
    UploadRefused,
    accepted,
    param,
    team_for_write,
)
from ingest.submit import feed_submit, parse_bool
from trustrank.accounts.models import FEEDS_WRITE
from trustrank.accounts.principal import principal_for_request
from trustrank.vulns.services.feeds import FEED_KINDS, FeedSourceError


@extend_schema(
    summary="Import a vulnerability feed (OSV, CISA KEV, FIRST EPSS or NVD) as an ingest job",
    parameters=[
        OpenApiParameter(
            "allow_shrink", bool, description="accept a KEV catalog that drops most entries"
        ),
    ],
    request={"application/octet-stream": {}},
    responses={202: None},
)
class FeedImportApi(ReceiverMixin, APIView):
    """Store the feed file as an ingest job and answer 202 with its status URL."""

    parser_classes = [RawBodyParser]
    required_scope = FEEDS_WRITE

    def post(self, request: Request, kind: str) -> Response:
        if kind not in FEED_KINDS:
            raise UploadRefused(
                404, "Not found", f"unknown feed {kind!r}; use one of {', '.join(FEED_KINDS)}"
            )
        principal = principal_for_request(request)
        team = team_for_write(principal=principal, scope=FEEDS_WRITE, what="feeds")
        try:
            job = feed_submit(
                kind=kind,
                payload=request.body,
                principal=principal,
                team=team,
                filename=str(request.headers.get("X-Filename") or f"{kind}-upload"),
                content_type=request.content_type or "",
                allow_shrink=parse_bool(param(request, "allow_shrink")),
            )
        except FeedSourceError as exc:
            raise UploadRefused(400, "Invalid feed upload", str(exc)) from exc
        except PermissionError as exc:
            raise UploadRefused(403, "Forbidden", str(exc)) from exc
        return accepted(job, kind=kind)


urlpatterns = [
    path("api/v1/feeds/<str:kind>", FeedImportApi.as_view(), name="api-feed-import"),
]
