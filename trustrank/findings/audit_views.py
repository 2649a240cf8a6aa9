"""The audit log page (/audit/): every event of the user's teams, newest first, with the
filters of the API (AuditEventFilterSet), keyset pages on id and each team's chain status."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from trustrank.accounts.models import Team
from trustrank.accounts.principal import principal_for_request
from trustrank.findings.audit_filters import KNOWN_ACTIONS, AuditEventFilterSet
from trustrank.findings.audit_selectors import audit_chains_for_principal, audit_event_list
from trustrank.findings.choices import FindingKind
from trustrank.findings.records import AuditEvent
from trustrank.findings.selectors import capped_count
from trustrank.inventory.models import Project
from trustrank.lib.numbers import int_or_none

PAGE_SIZE = 50
# Up to this many events the page verifies the chains as it renders; past it the status is
# fetched by htmx after the log is shown (verifying streams every event of the team).
INLINE_VERIFY_LIMIT = 20_000


def _changes(event: AuditEvent) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for what the event changed; unchanged fields are left out."""
    before = event.before if isinstance(event.before, dict) else {}
    after = event.after if isinstance(event.after, dict) else {}
    keys = [*before, *(k for k in after if k not in before)]
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]


def _after(value: str) -> int | None:
    return int_or_none(value)


@login_required
def audit_log_page(request: HttpRequest) -> HttpResponse:
    """Keyset pagination on id (newest first), so a deep page costs what the first costs at a
    million events; the count stops at selectors.COUNT_CAP."""
    principal = principal_for_request(request)
    events = audit_event_list(principal=principal)
    filterset = AuditEventFilterSet(request.GET, queryset=events)
    valid = filterset.is_valid()
    qs = filterset.qs if valid else events.none()
    count, capped = capped_count(qs)
    after = _after(request.GET.get("after", ""))
    page_qs = qs.filter(id__lt=after) if after is not None else qs
    rows = list(page_qs[: PAGE_SIZE + 1])
    has_next = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    for event in rows:
        event.changes = _changes(event)  # type: ignore[attr-defined]
    params = request.GET.copy()
    params.pop("after", None)
    first_query = params.urlencode()
    next_query = ""
    if has_next:
        params["after"] = str(rows[-1].pk)
        next_query = params.urlencode()
    context: dict[str, Any] = {
        "filter": filterset,
        "events": rows,
        "count": count,
        "capped": capped,
        "next_query": next_query,
        "first_query": first_query,
        "is_first_page": after is None,
    }
    status = 200 if valid else 400
    if getattr(request, "htmx", False):
        return render(request, "findings/_audit_table.html", context, status=status)
    inline = capped_count(events, cap=INLINE_VERIFY_LIMIT)[1] is False
    context.update(
        {
            "chains": audit_chains_for_principal(principal=principal) if inline else None,
            "teams": Team.objects.filter(pk__in=principal.team_ids).order_by("name"),
            "projects": Project.objects.filter(team_id__in=principal.team_ids).order_by("name"),
            "finding_kinds": FindingKind.choices,
            "actions": KNOWN_ACTIONS,
            "selected_actions": [
                a for v in request.GET.getlist("action") for a in v.split(",") if a
            ],
            "selected_kinds": request.GET.getlist("finding_kind"),
        }
    )
    return render(request, "findings/audit_log.html", context, status=status)


@login_required
def audit_chain_status(request: HttpRequest) -> HttpResponse:
    """The chain status of each of the user's teams (an htmx fragment of the log page)."""
    chains = audit_chains_for_principal(principal=principal_for_request(request))
    return render(request, "findings/_audit_chain.html", {"chains": chains})
