"""REST API of the build gate: `GET /api/v1/gate` (the verdict on a project version) and
`GET/PUT /api/v1/gate/policy` (the team's policy)."""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload
from trustrank.gate.evaluate import gate_answer, policy_json
from trustrank.gate.selectors import (
    GATE_READ_SCOPES,
    GateNotFound,
    GateTeamRequired,
    gate_policy_for,
    gate_target_find,
)
from trustrank.gate.serializers import GatePolicySerializer, GateResultSerializer
from trustrank.gate.services import (
    GatePolicyForbidden,
    GatePolicyInvalid,
    gate_failed_payload,
    gate_failure_record,
    gate_policy_set,
)
from trustrank.lib.api import problem
from trustrank.notify.events import notify_gate_failed

# `wait` is capped so a held request stays well inside a proxy's usual read timeout.
WAIT_MAX_SECONDS = 300
GATE_PARAMS = ("project", "version", "project_uuid", "environment", "wait", "team", "format")


class _BadParam(Exception):
    def __init__(self, param: str, detail: str) -> None:
        super().__init__(detail)
        self.param = param
        self.detail = detail


def _bad(exc: _BadParam) -> Response:
    return problem(400, "Bad request", exc.detail, param=exc.param,
                   errors={exc.param: [exc.detail]})


def _wait_param(raw: str | None) -> float:
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise _BadParam("wait", f"wait must be a number of seconds, 0 to {WAIT_MAX_SECONDS}") \
            from None
    if not math.isfinite(value) or not 0 <= value <= WAIT_MAX_SECONDS:
        raise _BadParam("wait", f"wait must be between 0 and {WAIT_MAX_SECONDS} seconds")
    return value


def _gate_params(query: Any) -> dict[str, Any]:
    unknown = [k for k in query if k not in GATE_PARAMS]
    if unknown:
        raise _BadParam(
            unknown[0],
            f"{unknown[0]!r} is not a parameter of the gate (use one of "
            f"{', '.join(p for p in GATE_PARAMS if p != 'format')})",
        )
    project = (query.get("project") or "").strip()
    version = (query.get("version") or "").strip()
    project_uuid = (query.get("project_uuid") or "").strip()
    if project_uuid and (project or version):
        raise _BadParam("project_uuid", "give project and version, or project_uuid, not both")
    if not project_uuid:
        if not project:
            raise _BadParam("project", "project is required (with version), or project_uuid")
        if not version:
            raise _BadParam("version", "version is required with project")
    environment = query.get("environment")
    if environment is not None:
        environment = environment.strip()
        if not environment or len(environment) > 120:
            raise _BadParam("environment", "environment must be a name of 1 to 120 characters")
    return {
        "project": project, "version": version, "project_uuid": project_uuid,
        "environment": environment, "wait": _wait_param(query.get("wait")),
        "team": (query.get("team") or "").strip(),
    }


class GateApi(APIView):
    """Pass or fail a build by TrustRank's context (the SSVC decisions of the latest ranking
    run, triage waivers and the team's gate policy), not by CVSS counts."""

    required_scope = GATE_READ_SCOPES

    @extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="project name (with `version`)"),
            OpenApiParameter("version", str, description="project version (with `project`)"),
            OpenApiParameter(
                "project_uuid", str,
                description="the project version's uuid (Dependency-Track's project uuid), "
                "instead of project and version",
            ),
            OpenApiParameter(
                "environment", str,
                description="where the build is going: echoed, with whether the version runs "
                "there (the decision is the finding's most urgent over every deployment)",
            ),
            OpenApiParameter(
                "wait", float,
                description=f"hold the answer up to this many seconds (0-{WAIT_MAX_SECONDS}) "
                "until the ranking that includes the version's latest upload is done",
            ),
            OpenApiParameter("team", str, description="team name or id, when the project name "
                             "exists in several of your teams"),
        ],
        responses={200: GateResultSerializer, 400: None, 404: None},
    )
    def get(self, request: Request) -> Response:
        try:
            params = _gate_params(request.query_params)
        except _BadParam as exc:
            return _bad(exc)
        principal = principal_for_request(request)

        def find() -> Any:
            return gate_target_find(
                principal=principal, project=params["project"], version=params["version"],
                project_uuid=params["project_uuid"], team_hint=params["team"],
            )

        try:
            result = gate_answer(
                target_find=find, environment=params["environment"], wait=params["wait"]
            )
        except GateNotFound as exc:
            return problem(404, "Not found", str(exc), param=exc.param)
        except GateTeamRequired as exc:
            return problem(400, "Bad request", str(exc), param="team",
                           errors={"team": [str(exc)]})
        # `gate.failed` once per (project version, ranking run), for a complete failing answer.
        if gate_failure_record(result=result):
            notify_gate_failed(team_id=result.team_id, payload=gate_failed_payload(result))
        return Response(result.as_json())


def _policy_team(request: Request, scope: str) -> Team:
    try:
        return team_for_upload(
            principal=principal_for_request(request), scope=scope, what="the gate policy",
            team_hint=request.query_params.get("team", ""),
        )
    except TeamNotAllowed as exc:
        raise PermissionDenied(str(exc)) from exc
    except TeamRequired as exc:
        raise ValidationError({"team": str(exc)}) from exc


def _policy_body(team: Team) -> dict[str, Any]:
    policy = gate_policy_for(team_id=team.pk)
    return {
        "team": team.name,
        **policy_json(policy),
        "updated_at": policy.updated_at.isoformat() if policy.pk else None,
        "updated_by": policy.updated_by_label if policy.pk else None,
    }


class GatePolicyApi(APIView):
    """The team's gate policy: `fail_on` (`immediate`, the default, or `out-of-cycle`: that
    decision or a more urgent one fails the build) and `new_only` (only findings whose
    vulnerability and component the project's previous version did not have). GET: scope
    `read` (or `sbom:write`); PUT: `admin`. `team` (name or id) when you belong to several."""

    required_scopes = {"GET": GATE_READ_SCOPES, "PUT": Scope.ADMIN}

    @extend_schema(responses=GatePolicySerializer)
    def get(self, request: Request) -> Response:
        principal = principal_for_request(request)
        scope = next((s for s in GATE_READ_SCOPES if principal.can(s)), Scope.READ)
        return Response(_policy_body(_policy_team(request, scope)))

    @extend_schema(
        request=inline_serializer("GatePolicyChange", fields={
            "fail_on": serializers.ChoiceField(choices=["immediate", "out-of-cycle"],
                                               required=False),
            "new_only": serializers.BooleanField(required=False),
            "reason": serializers.CharField(required=False),
        }),
        responses={200: GatePolicySerializer, 400: None, 403: None},
    )
    def put(self, request: Request) -> Response:
        team = _policy_team(request, Scope.ADMIN)
        data = request.data
        try:
            gate_policy_set(
                principal=principal_for_request(request), team_id=team.pk, values=data,
                reason=str(data.get("reason", "")) if isinstance(data, dict) else "",
            )
        except GatePolicyInvalid as exc:
            field = next(iter(exc.errors))
            return problem(400, "Invalid gate policy", str(exc), param=field,
                           errors={k: [v] for k, v in exc.errors.items()})
        except GatePolicyForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        return Response(_policy_body(team))
