"""Pages: the findings list (keyset-paginated, htmx table fragment) and a finding's page with
its evidence, history and triage form."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import (
    VEX_RESPONSES,
    FindingKind,
    Justification,
    Severity,
    TriageState,
)
from trustrank.findings.services.triage import (
    TriageError,
    TriageForbidden,
    finding_comment_add,
    finding_triage,
)
from trustrank.inventory.models import Project
from trustrank.ranking.explain import finding_rank_explain
from trustrank.vulns import selectors as vuln_selectors

PAGE_SIZE = 50


def _cursor(value: str) -> tuple[float, int] | None:
    try:
        prio, _, pk = value.partition(":")
        return float(prio), int(pk)
    except ValueError:
        return None


@login_required
def finding_list_page(request: HttpRequest) -> HttpResponse:
    """Keyset pagination on (baseline_priority, id) — the index's order — so page 1,000 costs
    what page 1 costs; the total is counted up to a cap, never over the whole table."""
    principal = principal_for_request(request)
    filterset = FindingFilterSet(request.GET, queryset=selectors.finding_list(principal=principal))
    qs = filterset.qs
    count, capped = selectors.capped_count(qs)
    after = _cursor(request.GET.get("after", ""))
    page_qs = qs
    if after is not None:
        prio, pk = after
        # A row comparison, not (a < x OR a = x AND b < y): PostgreSQL turns it into one
        # index range on (team, baseline_priority, id), so a deep page starts where it should.
        page_qs = qs.filter(
            RawSQL(
                '("findings_finding"."baseline_priority", "findings_finding"."id") < (%s, %s)',
                (prio, pk),
                output_field=BooleanField(),
            )
        )
    rows = list(page_qs[: PAGE_SIZE + 1])
    has_next = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    params = request.GET.copy()
    params.pop("after", None)
    base_query = params.urlencode()
    next_query = ""
    if has_next:
        last = rows[-1]
        params["after"] = f"{last.baseline_priority!r}:{last.pk}"
        next_query = params.urlencode()
    context: dict[str, Any] = {
        "filter": filterset,
        "findings": rows,
        "count": count,
        "capped": capped,
        "next_query": next_query,
        "first_query": base_query,
        "is_first_page": after is None,
        "projects": Project.objects.filter(team_id__in=principal.team_ids).order_by("name"),
        "severities": Severity.choices,
        "kinds": FindingKind.choices,
        "selected_kind": request.GET.getlist("kind"),
        "states": TriageState.choices,
        "selected_severity": request.GET.getlist("severity"),
        "selected_state": request.GET.getlist("state"),
    }
    if getattr(request, "htmx", False):
        return render(request, "findings/_findings_table.html", context)
    return render(request, "findings/finding_list.html", context)


@login_required
def finding_page(request: HttpRequest, finding_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    is_vulnerability = finding.kind == FindingKind.VULNERABILITY
    advisories = (
        vuln_selectors.advisories_for_finding(finding=finding) if is_vulnerability else []
    )
    context = {
        "finding": finding,
        "advisories": [
            {
                "advisory": a,
                "affected": vuln_selectors.affected_for_package(
                    advisory=a, ecosystem=finding.ecosystem, package_name=finding.package_name
                ),
            }
            for a in advisories
        ],
        "kev": vuln_selectors.kev_entry_for(cve_id=finding.cve_id) if is_vulnerability else None,
        "epss_history": (
            vuln_selectors.epss_history_for(cve_id=finding.cve_id) if is_vulnerability else []
        ),
        "audit": selectors.finding_audit_trail(finding=finding),
        "comments": selectors.finding_comments(finding=finding),
        "can_triage": principal.can("triage", finding.team_id),
        "states": TriageState.choices,
        "justifications": Justification.choices,
        "responses": VEX_RESPONSES,
        "ranking": finding_rank_explain(finding=finding),
    }
    return render(request, "findings/finding.html", context)


@login_required
@require_POST
def finding_triage_submit(request: HttpRequest, finding_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    try:
        finding_triage(
            finding=finding,
            principal=principal,
            state=request.POST.get("state", ""),
            justification=request.POST.get("justification", ""),
            response=request.POST.getlist("response"),
            detail=request.POST.get("detail", ""),
            reason=request.POST.get("reason", ""),
        )
        messages.success(request, "Triage state saved.")
    except TriageForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except TriageError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(reverse("findings:finding", args=[finding.pk]))


@login_required
@require_POST
def finding_comment_submit(request: HttpRequest, finding_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
    try:
        finding_comment_add(finding=finding, principal=principal, body=request.POST.get("body", ""))
    except TriageForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except TriageError as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(reverse("findings:finding", args=[finding.pk]))
