"""REST API for findings of every kind: list (filters as on the page), detail, triage (with
optimistic concurrency: ETag / If-Match and `version`), bulk triage, comments and the team's
triage policy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from django.core.paginator import EmptyPage, Page, PageNotAnInteger
from django.core.paginator import Paginator as DjangoPaginator
from django.db.models import QuerySet
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
from trustrank.findings.filters import (
    DEFAULT_ORDERING,
    FindingFilterSet,
    findings_ordered,
    search_alone_spellings,
)
from trustrank.findings.list_cache import list_cache_get, list_cache_key, list_cache_set
from trustrank.findings.models import Finding
from trustrank.findings.paging import (
    SEARCH_SORT_MAX,
    CountedRows,
    Matches,
    RowsLoader,
    SortedMatches,
)
from trustrank.findings.rank_rows import RankOrderedRows
from trustrank.findings.search import search_value
from trustrank.findings.search_groups import GroupedMatches
from trustrank.findings.serializers import (
    FindingSerializer,
    finding_rows_for_ids,
)
from trustrank.findings.triage_apis import (
    finding_etag,
)
from trustrank.lib.api import Pagination
from trustrank.lib.filters import StrictFilterBackend
from trustrank.ranking.ranks import ranked_rows_as_of, team_ranks_of
from trustrank.vulns import selectors as vuln_selectors


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON, encoded by orjson: a page of 50 findings took ~5 ms in the standard
    library's encoder. Values orjson does not take as DRF writes them (Decimal, datetimes
    with DRF's `Z`, lazy strings) go through DRF's own encoder; an indented answer (an
    `indent` in Accept) is DRF's."""

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Any = None) -> bytes:
        if data is None or self.get_indent(accepted_media_type or "", renderer_context or {}):
            if isinstance(data, dict):  # kept rows as their values
                data = {k: list(v) if isinstance(v, EncodedRows) else v for k, v in data.items()}
            return super().render(data, accepted_media_type, renderer_context)
        if isinstance(data, dict):  # kept rows as the JSON they were written as
            data = {k: orjson.Fragment(v.encoded) if isinstance(v, EncodedRows) else v
                    for k, v in data.items()}
        return fast_json(data)


def fast_json(data: Any) -> bytes:
    """JSON as FastJSONRenderer writes it."""
    return orjson.dumps(
        data, default=JSONRenderer.encoder_class().default,
        option=orjson.OPT_PASSTHROUGH_DATETIME,
    )


class EncodedRows:
    """A page's `results` kept as the JSON FastJSONRenderer wrote for them: a kept API page
    is written into the answer as it is, instead of being unpickled into 50 dicts of 60
    fields (~3 ms) and encoded again. Reads as the list it encodes (the browsable API, an
    indented answer, a test reading `response.data`)."""

    __slots__ = ("_rows", "encoded")

    def __init__(self, encoded: bytes) -> None:
        self.encoded = encoded
        self._rows: list[Any] | None = None

    def _list(self) -> list[Any]:
        if self._rows is None:
            self._rows = orjson.loads(self.encoded)
        return self._rows

    def __iter__(self) -> Any:
        return iter(self._list())

    def tolist(self) -> list[Any]:
        """What DRF's JSON encoder writes for an object that has it."""
        return self._list()

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, item: Any) -> Any:
        return self._list()[item]

    def __eq__(self, other: object) -> bool:
        return self._list() == (list(other) if isinstance(other, EncodedRows) else other)

    __hash__ = None  # type: ignore[assignment]


class FindingPaginator(DjangoPaginator):
    """Django's Paginator, except for a list whose total is an estimate (`estimated` on the
    rows, paging.CountedRows): a page reads one row more to tell whether a next page
    exists, and any page number with rows is served, so a client following `next` reads
    every finding once and stops at the last, whatever the estimate said."""

    def _estimated(self) -> bool:
        self.count  # noqa: B018 - counting sets `estimated` on the rows
        return bool(getattr(self.object_list, "estimated", False))

    def validate_number(self, number: Any) -> int:
        if not self._estimated():
            return super().validate_number(number)
        try:
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            number = int(number)
        except (TypeError, ValueError) as exc:
            raise PageNotAnInteger(self.error_messages["invalid_page"]) from exc
        if number < 1:
            raise EmptyPage(self.error_messages["min_page"])
        return number

    def page(self, number: Any) -> Page:
        if not self._estimated():
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        rows = list(self.object_list[bottom : bottom + self.per_page + 1])
        if not rows and number > 1:
            raise EmptyPage(self.error_messages["no_results"])
        return ListPage(rows[: self.per_page], number, self, more=len(rows) > self.per_page)


class ListPage(Page):
    """A page that knows whether another follows (read, or kept with the page), whatever
    its paginator's total says."""

    def __init__(self, object_list: Any, number: int, paginator: Any, *, more: bool) -> None:
        super().__init__(object_list, number, paginator)
        self._more = more

    def has_next(self) -> bool:
        return self._more


class FindingPagination(Pagination):
    """The API's pagination, plus `count_exact`: false when `count` is a cap (a search that
    matches more than SEARCH_SORT_MAX findings) or an estimate (a list of more than
    TRUSTRANK_FINDINGS_EXACT_COUNT_MAX findings, findings/totals.py), true otherwise. With a
    cap, `next` and `previous` page within `count`; with an estimate, `next` is there while
    findings follow."""

    django_paginator_class = FindingPaginator

    def get_paginated_response(self, data: Any) -> Response:
        response = super().get_paginated_response(data)
        rows = self.page.paginator.object_list
        response.data["count_exact"] = not (
            getattr(rows, "capped", False) or getattr(rows, "estimated", False)
        )
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count_exact"] = {
            "type": "boolean",
            "description": "false when count is capped (a search matching more than "
                           f"{SEARCH_SORT_MAX} findings) or estimated (a list of more than "
                           f"{settings.TRUSTRANK_FINDINGS_EXACT_COUNT_MAX} findings)",
        }
        out["required"] = [*out.get("required", []), "count_exact"]
        return out


@dataclass(frozen=True)
class ListRows:
    """Where the findings list (the page and the API) reads a filter's rows from in an order:
    a search's matches, found, sorted and kept (paging.SortedMatches), when there are few
    enough to sort; else, in the contextual order, the rank index (`ranked`); else the caller
    pages the queryset. `broad`: a search matching more than SEARCH_SORT_MAX findings, paged
    like the list, whose total is that cap."""

    matches: Matches | None
    broad: bool
    ranked: RankOrderedRows | None


def list_rows(
    qs: QuerySet[Finding], *, team_ids: Iterable[int], ordering: str, search: bool,
    load: RowsLoader, cap: int | None = None, spellings: list[str] | None = None,
) -> ListRows:
    """The rows of `qs` (already in `ordering`) for the list's page and API alike; `load`
    reads a page's rows from their ids, `cap` bounds the contextual order's total.
    `spellings` (`filters.search_alone_spellings`): the search value's, when it is the
    list's only filter; one team's list in the rank order is then answered from the search
    groups where they can (`search_groups.GroupedMatches`). The
    ranks that merge several teams are counted by the ranking app (`team_ranks_of`), which
    the findings app's lower modules may not import."""
    team_ids = list(team_ids)
    ranked_order = ordering in ("rank", "-rank")
    # Several teams' rank orders are merged by counted rank (RankOrderedRows): the queue
    # key that sorts one team's matches does not order them across teams.
    merged = ranked_order and len(set(team_ids)) > 1
    matches: Matches | None = None
    broad = False
    if search and not merged:
        grouped = GroupedMatches.find(
            qs, team_id=team_ids[0], spellings=spellings, as_of=ranked_rows_as_of,
        ) if spellings and ordering == "rank" and len(set(team_ids)) == 1 else None
        found: Matches = grouped or SortedMatches(qs, team_ids=team_ids)
        broad = found.usable and found.broad
        matches = found if found.usable and not broad else None
    ranked = (
        RankOrderedRows(qs, team_ids=team_ids, cap=cap, over_cap=broad, load=load,
                        ranks_of=team_ranks_of, descending=ordering == "-rank")
        if matches is None and ranked_order else None
    )
    return ListRows(matches=matches, broad=broad, ranked=ranked)


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
        # A page's rows are read by serializers.finding_rows_for_ids (the Jira links too).
        return selectors.finding_list(principal=principal_for_request(self.request))

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
        # A broad search is paged like the list, its total capped (`count_exact`): the
        # matches told it holds more than the cap, so it is not counted again.
        cap = SEARCH_SORT_MAX if search else None
        found = list_rows(queryset, team_ids=team_ids, ordering=ordering, search=search,
                          load=finding_rows_for_ids, cap=cap,
                          spellings=search_alone_spellings(self.request.query_params))
        if found.matches is not None:
            rows = CountedRows(queryset, team_ids=team_ids, matches=found.matches,
                               load=finding_rows_for_ids)
        elif found.ranked is not None:
            rows = found.ranked
        else:
            rows = CountedRows(queryset, team_ids=team_ids, cap=cap, over_cap=found.broad,
                               load=finding_rows_for_ids)
        return self.paginator.paginate_queryset(rows, self.request, view=self)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """As ListAPIView's, with the page's `count` and `results` kept under the teams'
        findings generation (list_cache.py): the same page asked again is not serialized
        again. A page is kept only once its query string passed the filters, under that
        string, the caller's teams and who `me` is: a kept page is the answer to a valid
        request, so it is served without building the FilterSet again (~2 ms of deep copies);
        any other string is checked first, so a cached page never hides a 400."""
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
            count, capped, estimated, number, page_size, more, encoded = kept
            paginator.request = request
            paginator.page = ListPage([], number, FindingPaginator(
                KnownCount(count, capped=capped, estimated=estimated),  # type: ignore[arg-type]
                page_size,
            ), more=more)
            return paginator.get_paginated_response(EncodedRows(encoded))
        base = self.get_queryset()
        backends = [backend() for backend in self.filter_backends]
        filterset: Any = None
        if len(backends) == 1 and isinstance(backends[0], StrictFilterBackend):
            # The parameters checked, the filtered queryset built only if the page is not kept.
            filterset = backends[0].filterset_checked(request, base, self)
        else:
            base = self.filter_queryset(base)
        page = self.paginate_queryset(base if filterset is None else filterset.qs)
        # The page's rows are FindingSerializer's output already (paginate_queryset reads
        # them with finding_rows_for_ids), encoded once: kept as JSON, the next caller's
        # answer splices it in (EncodedRows).
        results = EncodedRows(fast_json(list(page or [])))
        django_page = paginator.page
        rows = django_page.paginator.object_list
        list_cache_set(key, (django_page.paginator.count, bool(getattr(rows, "capped", False)),
                             bool(getattr(rows, "estimated", False)), django_page.number,
                             django_page.paginator.per_page, django_page.has_next(),
                             results.encoded))
        return paginator.get_paginated_response(results)


class KnownCount:
    """A sequence Django's Paginator pages by its known total (a kept page's)."""

    def __init__(self, n: int, *, capped: bool = False, estimated: bool = False) -> None:
        self._n = n
        self.capped = capped
        self.estimated = estimated

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
