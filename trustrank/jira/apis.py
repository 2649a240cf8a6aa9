"""REST API of a team's Jira settings: `GET /api/v1/jira`, `PUT /api/v1/jira`,
`DELETE /api/v1/jira`, all for the team's admins (`team`, a name or id, when you administer
several). The token is accepted, never answered."""

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
from trustrank.jira.serializers import JiraConfigSerializer
from trustrank.jira.services import (
    JiraConfigError,
    JiraForbidden,
    jira_config_delete,
    jira_config_get,
    jira_config_public,
    jira_config_set,
)
from trustrank.lib.api import problem

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
            jira_config_set(
                principal=principal_for_request(request), team_id=team.pk, values=dict(data)
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
