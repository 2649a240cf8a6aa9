"""GET /api/v1/findings/groups?by=fix|vulnerability&<the findings list's filters>."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.group_shapes import FixGroup, GroupPage, VulnerabilityGroup
from trustrank.findings.groups import GROUP_BY_CHOICES, GroupByError, finding_groups
from trustrank.lib.api import Pagination, problem
from trustrank.lib.filters import unknown_params_refuse
from trustrank.lib.numbers import BIGINT_MAX, NumberInvalid, int_parse
from trustrank.ranking.ranks import rank_sql

# Query parameters of the groups list besides the findings filters.
GROUP_PARAMS = ("by", Pagination.page_query_param, Pagination.page_size_query_param, "format")
MAX_PAGE = BIGINT_MAX // Pagination.max_page_size


@dataclass(frozen=True)
class PageRequest:
    number: int
    size: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size


class PageParamError(ValueError):
    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field


def page_request(params: Any) -> PageRequest:
    """`page` and `page_size` as the other list endpoints take them (trustrank.lib.api)."""

    def number(name: str, default: int) -> int:
        raw = params.get(name)
        if raw in (None, ""):
            return default
        try:
            # Bounded so that the page's offset fits PostgreSQL's bigint OFFSET.
            return int_parse(raw, minimum=1, maximum=MAX_PAGE)
        except NumberInvalid as exc:
            raise PageParamError(name, f"`{name}` {exc}") from exc

    size = min(number(Pagination.page_size_query_param, Pagination.page_size),
               Pagination.max_page_size)
    return PageRequest(number=number(Pagination.page_query_param, 1), size=size)


def _projects(refs: Any) -> list[dict[str, Any]]:
    return [{"id": p.id, "name": p.name} for p in refs]


def fix_group_data(g: FixGroup) -> dict[str, Any]:
    return {
        "package": g.package,
        "ecosystem": g.ecosystem,
        "target_version": g.target_version,
        "findings_closed": g.findings_closed,
        "projects_affected": len(g.projects),
        "projects": _projects(g.projects),
        "project_names": sorted(p.name for p in g.projects),
        "highest_decision": g.highest_decision,
        "best_rank": g.best_rank,
        "kev_count": g.kev_count,
        "finding_ids": list(g.finding_ids),
        "finding_ids_truncated": g.finding_ids_truncated,
        "no_fix_count": g.no_fix_count,
        "no_fix": {
            "count": g.no_fix_count,
            "projects": _projects(g.no_fix_projects),
            "finding_ids": list(g.no_fix_finding_ids),
        },
        "findings_total": g.findings_total,
        "sentence": g.sentence,
    }


def vulnerability_group_data(g: VulnerabilityGroup) -> dict[str, Any]:
    return {
        "vuln_id": g.vuln_id,
        "title": g.display_title,
        "aliases": list(g.aliases),
        "cve_id": g.cve_id,
        "severity": g.severity,
        "in_kev": g.in_kev,
        "findings_count": g.findings_count,
        "open_count": g.open_count,
        "states": g.states,
        "projects_affected": len(g.projects),
        "projects": _projects(g.projects),
        "project_names": sorted(p.name for p in g.projects),
        "components": list(g.components),
        "versions": list(g.versions),
        "packages": list(g.packages),
        "highest_decision": g.highest_decision,
        "best_rank": g.best_rank,
        "finding_ids": list(g.finding_ids),
        "sentence": g.sentence,
    }


# Seconds a client is told to wait before asking again for a page being grouped first.
PENDING_RETRY_SECONDS = 5


def group_page_data(page: GroupPage) -> list[dict[str, Any]]:
    if page.by == "fix":
        return [fix_group_data(g) for g in page.groups]
    return [vulnerability_group_data(g) for g in page.groups]


class FindingGroupListApi(APIView):
    """Open vulnerability findings grouped by the upgrade that fixes them (`by=fix`) or by
    advisory across projects (`by=vulnerability`); every filter of GET /api/v1/findings
    applies; `by` defaults to `fix`. Paginated: `count` is the number of groups. A page
    none is kept of that takes longer than `TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS` to
    group is answered 202 with no results and `Retry-After` while a job groups it."""

    required_scope = Scope.READ

    @extend_schema(
        parameters=[
            OpenApiParameter("by", str, enum=list(GROUP_BY_CHOICES), default="fix"),
            OpenApiParameter("page", int),
            OpenApiParameter("page_size", int),
        ],
        responses={200: None, 202: None},
    )
    def get(self, request: Request) -> Response:
        unknown_params_refuse(
            request.query_params.keys(),
            known={*FindingFilterSet.base_filters, *GROUP_PARAMS}, what="the groups list",
        )
        by = request.query_params.get("by", "fix")
        if by not in GROUP_BY_CHOICES:
            return problem(
                400,
                "Invalid group",
                f"`by` must be one of: {', '.join(GROUP_BY_CHOICES)}",
                errors={"by": [f"{by!r} is not one of {', '.join(GROUP_BY_CHOICES)}"]},
            )
        try:
            paging = page_request(request.query_params)
        except PageParamError as exc:
            return problem(400, "Bad request", str(exc), param=exc.field,
                           errors={exc.field: [str(exc)]})
        filterset = groups_filterset(request=request, by=by)
        if not filterset.is_valid():
            errors = {k: [str(e) for e in v] for k, v in filterset.errors.items()}
            return problem(
                400, "Bad request", "The request has invalid fields.",
                param=next(iter(errors)), errors=errors,
            )
        try:
            page = finding_groups(
                qs=filterset.qs, by=by, limit=paging.size, offset=paging.offset,
                rank_sql=rank_sql, team_ids=principal_for_request(request).team_ids,
                filter_params=filterset.data,
            )
        except GroupByError as exc:  # pragma: no cover - checked above
            return problem(400, "Invalid group", str(exc))
        url = request.build_absolute_uri()
        has_next = paging.offset + paging.size < page.count
        next_url = (
            replace_query_param(url, "page", paging.number + 1) if has_next else None
        )
        previous_url = None
        if paging.number > 1:
            previous_url = (
                remove_query_param(url, "page")
                if paging.number == 2
                else replace_query_param(url, "page", paging.number - 1)
            )
        return Response(
            {
                "by": by,
                # A page that takes long is shown as it was while it is grouped again
                # with the latest changes: when it was computed (null: it is current).
                "as_of": page.as_of.isoformat() if page.as_of else None,
                "refreshing": page.refreshing,
                "count": page.count,
                "next": next_url,
                "previous": previous_url,
                "results": group_page_data(page),
            },
            # None kept yet and too long to group in a request: a job is grouping it; ask
            # again (202, `refreshing` true, `as_of` null, no results).
            status=202 if page.pending else 200,
            headers={"Retry-After": str(PENDING_RETRY_SECONDS)} if page.pending else None,
        )


def groups_filterset(*, request: Any, by: str) -> FindingFilterSet:
    """The caller's findings through the findings list's FilterSet (the page and the API
    alike). `by=vulnerability` lists open findings unless the request chooses states itself
    (`state` or `open`); `by=fix` groups open findings only (the selector narrows it)."""
    params = request.GET.copy()
    if by == "vulnerability" and "open" not in params and not params.get("state"):
        params["open"] = "true"  # `open=` (empty) asks for every state
    return FindingFilterSet(
        params, queryset=selectors.finding_list(principal=principal_for_request(request))
    )
