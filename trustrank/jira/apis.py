"""REST API of a team's Jira settings: `GET /api/v1/jira`, `PUT /api/v1/jira`,
`DELETE /api/v1/jira`, all for the team's admins (`team`, a name or id, when you administer
several; the token is accepted, never answered), and `POST /api/v1/findings/<id>/jira`,
a finding's issue opened by hand (scope `triage`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload
from trustrank.findings.selectors import finding_get_for_principal
from trustrank.jira.serializers import JiraConfigSerializer
from trustrank.jira.services.config import (
    JiraConfigError,
    JiraForbidden,
    jira_config_delete,
    jira_config_get,
    jira_config_public,
    jira_config_set,
)
from trustrank.jira.services.delivery import JiraNotConfigured, jira_issue_open
from trustrank.lib.api import problem
from trustrank.lib.outbound import OutboundError, OutboundRefused

FIELDS = frozenset({"base_url", "project_key", "issue_type", "user", "token", "priorities"})
TEAM_PARAM = OpenApiParameter("team", str, description="team name or id, if you admin several")


class JiraConfigApi(APIView):
    """The team's Jira: where a finding's issue is opened and how TrustRank signs in."""

    required_scope = Scope.ADMIN

    def _team(self, request: Request) -> Team:
        try:
            return team_for_upload(
                principal=principal_for_request(request), scope=Scope.ADMIN,
                what="the Jira settings", team_hint=request.query_params.get("team", ""),
            )
        except TeamNotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except TeamRequired as exc:
            raise ValidationError({"team": str(exc)}) from exc

    def _body(self, team_id: int) -> dict[str, Any]:
        return {"team": team_id, **jira_config_public(jira_config_get(team_id=team_id))}

    @extend_schema(parameters=[TEAM_PARAM], responses=JiraConfigSerializer)
    def get(self, request: Request) -> Response:
        team = self._team(request)
        return Response(self._body(team.pk))

    @extend_schema(parameters=[TEAM_PARAM], request=JiraConfigSerializer,
                   responses=JiraConfigSerializer)
    def put(self, request: Request) -> Response:
        team = self._team(request)
        data = request.data
        if not isinstance(data, dict):
            return problem(400, "Bad request", "the body is a JSON object of Jira settings")
        unknown = sorted(set(data) - FIELDS)
        if unknown:
            return problem(
                400, "Bad request", f"{unknown[0]}: not a Jira setting "
                f"(give {', '.join(sorted(FIELDS))})", param=unknown[0],
                errors={name: ["not a Jira setting"] for name in unknown},
            )
        try:
            # A form-encoded body (QueryDict) gives one value per field, as JSON does.
            values = data.dict() if hasattr(data, "dict") else dict(data)
            jira_config_set(
                principal=principal_for_request(request), team_id=team.pk, values=values
            )
        except JiraForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except JiraConfigError as exc:
            return problem(400, "Invalid Jira settings", f"{exc.field}: {exc}",
                           param=exc.field, errors={exc.field: [str(exc)]})
        return Response(self._body(team.pk))

    @extend_schema(parameters=[TEAM_PARAM], responses={204: None})
    def delete(self, request: Request) -> Response:
        team = self._team(request)
        try:
            jira_config_delete(principal=principal_for_request(request), team_id=team.pk)
        except JiraForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        return Response(status=204)


class FindingJiraApi(APIView):
    """Open the finding's Jira issue with the team's Jira settings: 201 {key, url} when opened,
    200 with the existing one when the finding has it, 409 when the team has no Jira
    settings, 502 when Jira refuses (`jira_status` is its status) or does not answer."""

    required_scope = Scope.TRIAGE

    @extend_schema(request=None, responses={200: dict, 201: dict})
    def post(self, request: Request, finding_id: int) -> Response:
        principal = principal_for_request(request)
        finding = finding_get_for_principal(principal=principal, finding_id=finding_id)
        url = request.build_absolute_uri(f"/findings/{finding.pk}/")
        try:
            status, detail, link = jira_issue_open(principal=principal, finding=finding, url=url)
        except JiraForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except JiraNotConfigured as exc:
            return problem(409, "Jira is not set up", str(exc))
        except (OutboundError, OutboundRefused) as exc:
            return problem(502, "Jira did not answer", str(exc))
        if link is None:
            return problem(502, "Jira refused the issue", detail, jira_status=status)
        return Response({"key": link.key, "url": link.url, "detail": detail},
                        status=201 if status == 201 else 200)
