"""REST API for findings of every kind: list (filters as on the page), detail, triage (with
optimistic concurrency: ETag / If-Match and `version`), bulk triage, comments and the team's
triage policy."""

from __future__ import annotations

import re
from typing import Any

import orjson
from django.core.paginator import Paginator as DjangoPaginator
from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.choices import FindingKind
from trustrank.findings.filters import DEFAULT_ORDERING, FindingFilterSet, findings_ordered
from trustrank.findings.list_cache import list_cache_get, list_cache_key, list_cache_set
from trustrank.findings.models import Finding
from trustrank.findings.paging import (
    SEARCH_SORT_MAX,
    CountedRows,
    RankOrderedRows,
    SortedMatches,
)
from trustrank.findings.search import search_value
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
from trustrank.lib.api import Pagination, problem
from trustrank.lib.filters import StrictFilterBackend
from trustrank.lib.numbers import INT_MAX, NumberInvalid, int_parse
from trustrank.vulns import selectors as vuln_selectors


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON, encoded by orjson: a page of 50 findings took ~5 ms in the standard
    library's encoder. Values orjson does not take as DRF writes them (Decimal, datetimes
    with DRF's `Z`, lazy strings) go through DRF's own encoder; an indented answer (an
    `indent` in Accept) is DRF's."""

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Any = None) -> bytes:
        if data is None or self.get_indent(accepted_media_type or "", renderer_context or {}):
            return super().render(data, accepted_media_type, renderer_context)
        return orjson.dumps(
            data, default=self.encoder_class().default, option=orjson.OPT_PASSTHROUGH_DATETIME
        )


class FindingPagination(Pagination):
    """The API's pagination, plus `count_exact`: false when `count` is a cap (a search that
    matches more than SEARCH_SORT_MAX findings), true otherwise. `next` and `previous` page within
    `count` either way."""

    def get_paginated_response(self, data: Any) -> Response:
        response = super().get_paginated_response(data)
        capped = bool(getattr(self.page.paginator.object_list, "capped", False))
        response.data["count_exact"] = not capped
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count_exact"] = {
            "type": "boolean",
            "description": "false when count is capped (a search matching more than "
                           f"{SEARCH_SORT_MAX} findings)",
        }
        out["required"] = [*out.get("required", []), "count_exact"]
        return out


class FindingListApi(ListAPIView[Finding]):
    """Findings of every kind (filter `kind`) of the caller's teams, as the findings page
    lists them: most urgent first by the latest ranking run's rank, the unranked after by
    baseline priority (`ordering=baseline`, `-rank` or `due` for the others)."""

    serializer_class = FindingSerializer
    filterset_class = FindingFilterSet
    required_scope = Scope.READ
    pagination_class = FindingPagination
    renderer_classes = [
        FastJSONRenderer,
        *(r for r in api_settings.DEFAULT_RENDERER_CLASSES if r is not JSONRenderer),
    ]

    def get_queryset(self) -> Any:
        # The Jira links of a page in one query (the serializer's `jira`).
        return selectors.finding_list(
            principal=principal_for_request(self.request)
        ).prefetch_related("jira_links")

    def paginate_queryset(self, queryset: Any) -> Any:
        """Totals from the generation-keyed count cache; the contextual order (the default)
        read from the rank index (trustrank/findings/paging.py): a million-finding team pages
        in milliseconds."""
        if self.paginator is None:
            return None
        team_ids = principal_for_request(self.request).team_ids
        rows: Any
        asked = self.request.query_params.get("ordering")
        ordering = asked or DEFAULT_ORDERING
        search = bool(search_value(self.request.query_params))
        if not asked:  # the filter left the queryset in the baseline order
            queryset = findings_ordered(queryset, ordering)
        matches = SortedMatches(queryset, team_ids=team_ids) if search else None
        if matches is not None and matches.usable and not matches.broad:
            # A search's matches are found, sorted by rank lookups and kept (SortedMatches).
            rows = CountedRows(queryset, team_ids=team_ids, matches=matches)
        else:
            # A broad search is paged like the list, its total capped (`count_exact`).
            cap = SEARCH_SORT_MAX if search else None
            rows = (RankOrderedRows(queryset, team_ids=team_ids, cap=cap) if ordering == "rank"
                    else CountedRows(queryset, team_ids=team_ids, cap=cap))
        return self.paginator.paginate_queryset(rows, self.request, view=self)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """As ListAPIView's, with the page's `count` and `results` kept under the teams'
        findings generation (list_cache.py): the same page asked again is not serialized
        again. The filters validate first, so a cached page never skips a 400."""
        base = self.get_queryset()
        backends = [backend() for backend in self.filter_backends]
        filterset: Any = None
        if len(backends) == 1 and isinstance(backends[0], StrictFilterBackend):
            # The parameters checked, the filtered queryset built only if the page is not kept.
            filterset = backends[0].filterset_checked(request, base, self)
        else:
            base = self.filter_queryset(base)
        principal = principal_for_request(request)
        paginator = self.paginator
        assert paginator is not None
        # `assignee=me` means someone else for each caller.
        viewer = (principal.api_key.pk if principal.api_key else None,
                  getattr(principal.user, "pk", None)) if "assignee" in request.query_params else ()
        key = list_cache_key(what="api", team_ids=principal.team_ids,
                             query=request.META.get("QUERY_STRING", ""), viewer=viewer)
        kept = list_cache_get(key)
        if kept is not None:
            count, capped, number, page_size, results = kept
            paginator.request = request
            paginator.page = DjangoPaginator(
                KnownCount(count, capped=capped), page_size  # type: ignore[arg-type]
            ).page(number)
            return paginator.get_paginated_response(results)
        page = self.paginate_queryset(base if filterset is None else filterset.qs)
        results = self.get_serializer(page, many=True).data
        django_page = paginator.page
        list_cache_set(key, (django_page.paginator.count,
                             bool(getattr(django_page.paginator.object_list, "capped", False)),
                             django_page.number,
                             django_page.paginator.per_page, list(results)))
        return paginator.get_paginated_response(results)


class KnownCount:
    """A sequence Django's Paginator pages by its known total (a kept page's)."""

    def __init__(self, n: int, *, capped: bool = False) -> None:
        self._n = n
        self.capped = capped

    def count(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, item: slice) -> list[Any]:
        return []


def finding_detail_data(*, finding: Finding) -> dict[str, Any]:
    data = dict(FindingSerializer(finding).data)
    data["comments"] = [
        {"id": c.pk, "author": c.author_label, "body": c.body, "created_at": c.created_at}
        for c in selectors.finding_comments(finding=finding)
    ]
    data["audit"] = [
        {
            "action": e.action,
            "actor": e.actor_label,
            "actor_kind": e.actor_kind,
            "at": e.created_at,
            "before": e.before,
            "after": e.after,
            "reason": e.reason,
        }
        for e in selectors.finding_audit_trail(finding=finding)
    ]
    if finding.kind != FindingKind.VULNERABILITY:
        return data
    advisories = vuln_selectors.advisories_for_finding(finding=finding)
    data["advisories"] = [
        {
            "id": a.id,
            "aliases": a.aliases,
            "summary": a.summary,
            "details": a.details,
            "severity": a.severity,
            "cvss_score": a.cvss_score,
            "published": a.published,
            "modified": a.modified,
            "withdrawn": a.withdrawn,
            "references": a.references,
            "affected": vuln_selectors.affected_for_package(
                advisory=a, ecosystem=finding.ecosystem, package_name=finding.package_name
            ),
        }
        for a in advisories
    ]
    kev = vuln_selectors.kev_entry_for(cve_id=finding.cve_id)
    data["kev"]["entry"] = (
        None
        if kev is None
        else {
            "cve_id": kev.cve_id,
            "vendor_project": kev.vendor_project,
            "product": kev.product,
            "vulnerability_name": kev.vulnerability_name,
            "date_added": kev.date_added,
            "due_date": kev.due_date,
            "required_action": kev.required_action,
            "known_ransomware_campaign_use": kev.known_ransomware_campaign_use,
        }
    )
    data["epss"]["history"] = [
        {
            "date": s.score_date,
            "probability": s.epss,
            "percentile": s.percentile,
            "model_version": s.model_version,
        }
        for s in vuln_selectors.epss_history_for(cve_id=finding.cve_id)
    ]
    data["vex_evidence"] = finding.vex_evidence
    return data


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


class FindingDetailApi(APIView):
    required_scope = Scope.READ

    @extend_schema(responses=FindingSerializer)
    def get(self, request: Request, finding_id: int) -> Response:
        finding = selectors.finding_get_for_principal(
            principal=principal_for_request(request), finding_id=finding_id
        )
        response = Response(finding_detail_data(finding=finding))
        response["ETag"] = finding_etag(finding)
        return response


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
