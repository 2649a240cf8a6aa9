"""The triage API: one finding's state (guarded by If-Match on its version), bulk triage and
its jobs, the team's triage policy, and comments."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.models import Finding
from trustrank.findings.serializers import (
    BulkTriageJobSerializer,
    BulkTriageSerializer,
    CommentSerializer,
    FindingSerializer,
    TriagePolicySerializer,
    TriageSerializer,
)
from trustrank.findings.services.bulk import bulk_triage_submit
from trustrank.findings.services.bulk_selection import BulkFilterError, BulkSelectionError
from trustrank.findings.services.due_dates import triage_policy_for, triage_policy_set
from trustrank.findings.services.triage import (
    UNSET,
    TriageConflict,
    TriageError,
    TriageForbidden,
    finding_comment_add,
    finding_triage,
)
from trustrank.lib.api import problem
from trustrank.lib.numbers import INT_MAX, NumberInvalid, int_parse


def finding_etag(finding: Finding) -> str:
    return f'"{finding.version}"'


# An entity tag (RFC 9110 section 8.8.3): optionally weak, then an opaque quoted string.
_ENTITY_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*')


class IfMatchInvalid(ValueError):
    pass


def if_match_versions(header: str) -> set[int] | None:
    """The versions an If-Match header accepts: None for `*` (any), else the versions of its
    strong entity tags. If-Match compares strongly (RFC 9110 section 13.1.1): a weak tag
    (`W/"3"`) never matches, so it adds no version. IfMatchInvalid for a header that is not
    a list of entity tags, or a strong tag that is not one of our ETags (`"<version>"`)."""
    if header.strip() == "*":
        return None
    versions: set[int] = set()
    for part in header.split(","):
        m = _ENTITY_TAG.fullmatch(part)
        if m is None:
            raise IfMatchInvalid(part.strip())
        if m.group(1):
            continue
        try:
            versions.add(int_parse(m.group(2), minimum=1, maximum=INT_MAX))
        except NumberInvalid as exc:
            raise IfMatchInvalid(part.strip()) from exc
    return versions


def triage_error_response(exc: TriageError) -> Response:
    extra: dict[str, Any] = {}
    if exc.field:
        extra["errors"] = {exc.field: [str(exc)]}
    return problem(400, "Invalid triage change", str(exc), **extra)


class FindingTriageApi(APIView):
    """Change the VEX state, owner or due date: {state, justification, response[], detail,
    assignee, due_date, reason}. Send the version you read as `If-Match: "<version>"` (412 if
    it moved) or as `version` in the body (409); both answers carry the finding as it is now.
    Without either the change applies whatever the version."""

    required_scope = Scope.TRIAGE

    @extend_schema(request=TriageSerializer, responses=FindingSerializer)
    def post(self, request: Request, finding_id: int) -> Response:
        principal = principal_for_request(request)
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
        form = TriageSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        expected: int | None = data.pop("version", None)
        conflict_status = 409
        if_match = request.headers.get("If-Match")
        if if_match:
            try:
                accepted = if_match_versions(if_match)
            except IfMatchInvalid:
                return problem(400, "Invalid If-Match", 'If-Match takes the ETag, e.g. "3"',
                               param="If-Match", errors={"If-Match": ['an ETag such as "3"']})
            if accepted is not None:
                # The version read now if the header names it (the row lock in
                # finding_triage then catches a change since); else one that cannot match
                # (0: versions start at 1), for a 412 with the finding as it is.
                expected = finding.version if finding.version in accepted else min(
                    accepted, default=0
                )
                conflict_status = 412
        try:
            finding = finding_triage(
                finding=finding,
                principal=principal,
                state=data.get("state"),
                justification=data.get("justification"),
                response=data.get("response"),
                detail=data.get("detail"),
                reason=data["reason"],
                expected_version=expected,
                assignee=data.get("assignee", UNSET),
                due_date=data.get("due_date", UNSET),
            )
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except TriageConflict as exc:
            current = selectors.finding_get_for_principal(
                principal=principal, finding_id=finding.pk
            )
            body = FindingSerializer(current).data
            response = problem(
                conflict_status,
                "Precondition failed" if conflict_status == 412 else "Conflict",
                str(exc),
                current=body,
                version=current.version,
                state=current.state,
                changes=selectors.finding_changes_since(
                    finding=current, version=exc.expected_version
                ),
            )
            response["ETag"] = finding_etag(current)
            return response
        except TriageError as exc:
            return triage_error_response(exc)
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding.pk)
        response = Response(FindingSerializer(finding).data)
        response["ETag"] = finding_etag(finding)
        return response


class BulkTriageApi(APIView):
    """Triage many findings at once: `ids` (or {"id", "version"} items) or a `filter` with the
    findings list's filter names, plus `reason` and any of state, justification, response,
    detail, assignee, due_date. Up to TRUSTRANK_BULK_TRIAGE_SYNC_MAX findings: 200 with the
    counts; more: 202 with a job (`id`, `status_url`) that a worker runs in batches."""

    required_scope = Scope.TRIAGE

    @extend_schema(
        request=BulkTriageSerializer, responses={200: None, 202: BulkTriageJobSerializer}
    )
    def post(self, request: Request) -> Response:
        principal = principal_for_request(request)
        form = BulkTriageSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        ids: list[int] | None = None
        versions: dict[str, int] = {}
        if "ids" in data:
            ids = []
            for item in data["ids"]:
                if isinstance(item, dict):
                    ids.append(int(item["id"]))
                    if item.get("version") is not None:
                        versions[str(item["id"])] = int(item["version"])
                else:
                    ids.append(int(item))
        changes = {k: data[k] for k in (
            "state", "justification", "response", "detail", "assignee", "due_date"
        ) if k in data}
        user = getattr(principal.api_key, "created_by_id", None) if principal.api_key else (
            principal.user.pk if principal.user is not None else None
        )
        try:
            submitted = bulk_triage_submit(
                principal=principal, changes=changes, reason=data["reason"], ids=ids,
                versions=versions, filter_params=data.get("filter"), user_id=user,
            )
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except BulkSelectionError as exc:
            return problem(400, "Unknown findings", str(exc), ids=exc.ids,
                           errors={"ids": [str(exc)]})
        except BulkFilterError as exc:
            errors = {f"filter.{k}" if k else "filter": v for k, v in exc.errors.items()}
            return problem(400, "Invalid filter", "the filter has invalid fields",
                           param=next(iter(errors)), errors=errors)
        except TriageError as exc:
            return triage_error_response(exc)
        if submitted.job is not None:
            body = BulkTriageJobSerializer(submitted.job).data
            response = Response(body, status=202)
            response["Location"] = body["status_url"]
            return response
        assert submitted.result is not None
        return Response({"status": "done", "ref": submitted.ref, **submitted.result.as_dict()})


class BulkTriageJobApi(APIView):
    required_scope = Scope.READ

    @extend_schema(responses=BulkTriageJobSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.bulk_triage_job_get_for_principal(
            principal=principal_for_request(request), job_id=job_id
        )
        return Response(BulkTriageJobSerializer(job).data)


class TriagePolicyApi(APIView):
    """The team's due dates by ranking decision (days; null: no due date). GET: read scope;
    PUT: the team's admins. `team` (name or id) when you belong to several."""

    required_scopes = {"GET": Scope.READ, "PUT": Scope.ADMIN}

    def _team(self, request: Request, scope: str) -> Any:
        from rest_framework.exceptions import PermissionDenied, ValidationError

        from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload

        try:
            return team_for_upload(
                principal=principal_for_request(request), scope=scope,
                what="the triage policy", team_hint=request.query_params.get("team", ""),
            )
        except TeamNotAllowed as exc:
            raise PermissionDenied(str(exc)) from exc
        except TeamRequired as exc:
            raise ValidationError({"team": str(exc)}) from exc

    def _body(self, team_id: int) -> dict[str, Any]:
        days = triage_policy_for(team_id=team_id)
        return {
            "team": team_id,
            "immediate_days": days.immediate_days,
            "out_of_cycle_days": days.out_of_cycle_days,
            "scheduled_days": days.scheduled_days,
            "defer_days": days.defer_days,
        }

    @extend_schema(responses=TriagePolicySerializer)
    def get(self, request: Request) -> Response:
        team = self._team(request, Scope.READ)
        return Response(self._body(team.pk))

    @extend_schema(request=TriagePolicySerializer, responses=TriagePolicySerializer)
    def put(self, request: Request) -> Response:
        team = self._team(request, Scope.ADMIN)
        form = TriagePolicySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            triage_policy_set(
                principal=principal_for_request(request), team_id=team.pk,
                values=dict(form.validated_data),
            )
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        return Response(self._body(team.pk))


class FindingCommentApi(APIView):
    required_scope = Scope.TRIAGE

    @extend_schema(request=CommentSerializer, responses={201: None})
    def post(self, request: Request, finding_id: int) -> Response:
        principal = principal_for_request(request)
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
        form = CommentSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            comment = finding_comment_add(
                finding=finding, principal=principal, body=form.validated_data["body"]
            )
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except TriageError as exc:
            return problem(400, "Invalid comment", str(exc), errors={"body": [str(exc)]})
        return Response(
            {
                "id": comment.pk,
                "author": comment.author_label,
                "body": comment.body,
                "created_at": comment.created_at,
            },
            status=201,
        )
