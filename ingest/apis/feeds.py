"""Feed import receivers: POST /api/v1/feeds/{osv|kev|epss} with the raw file as the body
(OSV: one JSON record, a JSON array or a zip; KEV: the catalog JSON; EPSS: CSV or .csv.gz).
Feeds are global reference data, so this needs the `admin` scope."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.lib.api import problem
from trustrank.vulns.services.feeds import FEED_KINDS, FeedSourceError, feed_import_submit


class _RawBody(BaseParser):
    media_type = "*/*"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return {}


@extend_schema(
    summary="Import a vulnerability feed (OSV, CISA KEV or FIRST EPSS) as an ingest job",
    parameters=[OpenApiParameter("team", int, description="for people admin in several teams")],
    request={"application/octet-stream": {}},
    responses={202: None},
)
class FeedImportApi(APIView):
    parser_classes = [_RawBody]
    required_scope = Scope.ADMIN

    def post(self, request: Request, kind: str) -> Response:
        if kind not in FEED_KINDS:
            return problem(
                404, "Not found", f"unknown feed {kind!r}; use one of {', '.join(FEED_KINDS)}"
            )
        principal = principal_for_request(request)
        if principal.api_key is not None:
            team = principal.api_key.team
        else:
            admin_teams = principal.teams_with(Scope.ADMIN)
            hint = str(request.query_params.get("team") or "")
            if hint:
                team_id = int(hint) if hint.isdigit() else -1
                if team_id not in admin_teams:
                    return problem(403, "Forbidden", "you are not an admin of that team")
            elif len(admin_teams) == 1:
                team_id = admin_teams[0]
            else:
                return problem(
                    400, "Team required", "you administer several teams: pass ?team=<id>"
                )
            team = Team.objects.get(pk=team_id)
        body = request.body
        try:
            job = feed_import_submit(
                kind=kind,
                payload=body,
                principal=principal,
                team=team,
                filename=str(request.headers.get("X-Filename") or f"{kind}-upload"),
                content_type=request.content_type or "",
            )
        except FeedSourceError as exc:
            return problem(400, "Invalid feed upload", str(exc))
        except PermissionError as exc:
            return problem(403, "Forbidden", str(exc))
        url = f"/api/v1/jobs/{job.pk}"
        return Response(
            {"id": str(job.pk), "kind": kind, "status": job.status, "status_url": url},
            status=202,
            headers={"Location": url},
        )


urlpatterns = [
    path("api/v1/feeds/<str:kind>", FeedImportApi.as_view(), name="api-feed-import"),
]
