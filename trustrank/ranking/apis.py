"""REST API: the ranked queue (priorities) and ranking runs."""

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
from trustrank.lib.api import Pagination, problem
from trustrank.lib.filters import unknown_params_refuse
from trustrank.lib.numbers import BIGINT_MAX, NumberInvalid, int_parse
from trustrank.ranking import selectors
from trustrank.ranking.filters import PriorityFilterSet
from trustrank.ranking.serializers import (
    PrioritySerializer,
    RankChangeSerializer,
    RankingChangesSerializer,
    RankingRunRequestSerializer,
    RankingRunSerializer,
)
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.store_history import ranking_changes


class KnownCountPagination(Pagination):
    """Page-number pagination whose total may come from the ranking run's counts instead of
    a COUNT over the whole queue."""

    known_count: int | None = None

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        if self.known_count is None:
            return super().paginate_queryset(queryset, request, view)
        page_size = self.get_page_size(request)
        if not page_size:
            return None
        raw = request.query_params.get(self.page_query_param) or "1"
        try:
            # Bounded so that the page's start fits an OFFSET.
            number = int_parse(raw, minimum=1, maximum=BIGINT_MAX // max(page_size, 1))
        except NumberInvalid as exc:
            raise ValidationError({"page": "must be a positive integer"}) from exc
        self.request = request
        start = (number - 1) * page_size
        rows = list(queryset[start : start + page_size])
        self._count = self.known_count
        self._number = number
        self._size = page_size
        return rows

    def get_paginated_response(self, data: Any) -> Response:
        if self.known_count is None:
            return super().get_paginated_response(data)
        last = max(1, -(-self._count // self._size))
        url = self.request.build_absolute_uri()
        from rest_framework.utils.urls import remove_query_param, replace_query_param

        nxt = replace_query_param(url, "page", self._number + 1) if self._number < last else None
        prev = None
        if self._number > 1:
            prev = (
                remove_query_param(url, "page") if self._number == 2
                else replace_query_param(url, "page", self._number - 1)
            )
        return Response(
            {"count": self._count, "next": nxt, "previous": prev, "results": data}
        )


ENVIRONMENT_PARAM = OpenApiParameter(
    "environment", str,
    description="One environment's queue (absent or blank: the team's whole queue)",
)


class PriorityListApi(APIView):
    """The ranked queue: open findings of every kind in rank order, with their explanation."""

    required_scope = Scope.READ
    # Declared so the schema documents the paginated envelope the view answers with.
    pagination_class = Pagination

    @extend_schema(
        parameters=[ENVIRONMENT_PARAM, *PriorityFilterSet.openapi_parameters()],
        responses=PrioritySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        principal = principal_for_request(request)
        # Blank is the whole queue, as on the page (whose selector sends `environment=`
        # for "all environments"): no environment is named "".
        environment = request.query_params.get("environment") or None
        unknown_params_refuse(
            request.query_params.keys(),
            known={*PriorityFilterSet.base_filters, "environment", "page", "page_size", "format"},
            what="the priorities list",
        )
        filterset = PriorityFilterSet(
            request.query_params,
            queryset=selectors.priority_list(
                principal=principal, environment=environment, open_only=False
            ),
        )
        if not filterset.is_valid():
            raise ValidationError(filterset.errors)
        paginator = KnownCountPagination()
        if not filterset.is_filtered():
            paginator.known_count = selectors.priority_count(
                principal=principal, environment=environment
            )
        # In queue order (merged by rank across several teams), each page's ranks counted.
        queue = selectors.PriorityQueue(
            filterset.qs, team_ids=sorted(principal.team_ids), environment=environment
        )
        page = paginator.paginate_queryset(queue, request, view=self) or []
        return paginator.get_paginated_response(PrioritySerializer(page, many=True).data)


def _team_for_request(request: Request, hint: str) -> Team:
    try:
        return team_for_upload(
            principal=principal_for_request(request), scope=Scope.TRIAGE,
            what="ranking runs", team_hint=hint,
        )
    except TeamNotAllowed as exc:
        raise PermissionDenied(str(exc)) from exc
    except TeamRequired as exc:
        raise ValidationError({"team": str(exc)}) from exc


class RankingRunListApi(APIView):
    """`POST`: rank the team's findings now (scope triage): 202 with the run's id and
    status URL. `GET`: the team's recent runs."""

    required_scopes = {"GET": Scope.READ, "POST": Scope.TRIAGE}
    pagination_class = Pagination

    @extend_schema(responses=RankingRunSerializer(many=True))
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(
            selectors.ranking_run_list(principal=principal_for_request(request)),
            request,
            view=self,
        ) or []
        return paginator.get_paginated_response(RankingRunSerializer(page, many=True).data)

    @extend_schema(request=RankingRunRequestSerializer, responses={202: RankingRunSerializer})
    def post(self, request: Request) -> Response:
        form = RankingRunRequestSerializer(data=request.data or {})
        form.is_valid(raise_exception=True)
        team = _team_for_request(request, form.validated_data["team"] or
                                 request.query_params.get("team", ""))
        principal = principal_for_request(request)
        if not principal.can(Scope.TRIAGE, team.pk):
            return problem(403, "Forbidden", "starting a ranking run needs the 'triage' scope")
        run = ranking_run_request(
            team_id=team.pk, trigger="api", requested_by=principal, delay_seconds=0
        )
        data = RankingRunSerializer(run).data
        response = Response(data, status=202)
        response["Location"] = data["status_url"]
        return response


class RankingRunDetailApi(APIView):
    required_scope = Scope.READ

    @extend_schema(responses=RankingRunSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.ranking_run_get_for_principal(
            principal=principal_for_request(request), run_id=run_id
        )
        return Response(RankingRunSerializer(run).data)


class RankingRunChangesApi(APIView):
    """What moved most in this run since the previous one, and why (the factors whose value
    or effect changed)."""

    required_scope = Scope.READ

    @extend_schema(
        parameters=[OpenApiParameter("limit", int, description="At most this many (50)")],
        responses=RankingChangesSerializer,
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.ranking_run_get_for_principal(
            principal=principal_for_request(request), run_id=run_id
        )
        try:
            limit = min(500, max(1, int_parse(request.query_params.get("limit") or "50")))
        except NumberInvalid as exc:
            raise ValidationError({"limit": "must be an integer"}) from exc
        changes = ranking_changes(run=run, limit=limit)
        return Response(
            {
                "run": run.pk,
                "previous": run.previous_id,
                "results": RankChangeSerializer(changes, many=True).data,
            }
        )
