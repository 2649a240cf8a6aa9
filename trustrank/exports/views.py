"""Pages: start an export (the findings list's filters carried along), watch its progress
(htmx polling, as the job pages do), download it; and the printable report."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse

from trustrank.accounts.models import Team
from trustrank.accounts.principal import principal_for_request
from trustrank.exports import selectors
from trustrank.exports.apis import export_file_response, export_response
from trustrank.exports.models import ExportFormat
from trustrank.exports.services.params import (
    OWN_PARAMS,
    ExportParamError,
    export_request_parse,
    export_teams,
)
from trustrank.exports.services.rows import export_count
from trustrank.exports.services.run import (
    export_create,
    export_selection_for,
    export_stream_cap,
)
from trustrank.findings.choices import FindingKind, Severity, TriageState
from trustrank.jobs.errors import JobsBusy
from trustrank.jobs.models import JobClass

# Filters the page shows as fields; any other findings filter rides along hidden.
_SHOWN = ("kind", "severity", "state", "q")


@login_required
def export_page(request: HttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    if request.method == "POST":
        # The page always runs the export as a job: the person watches it and downloads it.
        try:
            req = export_request_parse(principal=principal, params=request.POST)
            selection = export_selection_for(req)
        except ExportParamError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("exports:export-page"))
        # Small exports a person waits for are interactive; large ones are batch work.
        cap = export_stream_cap(req.format)
        large = export_count(selection, cap=cap) > cap
        try:
            with transaction.atomic():
                export = export_create(
                    principal=principal, req=req, streamed=False,
                    job_class=JobClass.BATCH if large else JobClass.INTERACTIVE,
                )
        except JobsBusy as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("exports:export-page"))
        return HttpResponseRedirect(reverse("exports:export", args=[export.pk]))
    carried = [
        (name, value)
        for name in request.GET
        if name not in _SHOWN and name not in OWN_PARAMS and name != "after"
        for value in request.GET.getlist(name)
        if value
    ]
    context: dict[str, Any] = {
        "formats": ExportFormat.choices,
        "selected_format": request.GET.get("format", ExportFormat.CSV),
        "carried": carried,
        "q": request.GET.get("q", ""),
        "as_of": request.GET.get("as_of", ""),
        "ranking_run": request.GET.get("ranking_run", ""),
        "kinds": FindingKind.choices,
        "severities": Severity.choices,
        "states": TriageState.choices,
        "selected_kind": request.GET.getlist("kind"),
        "selected_severity": request.GET.getlist("severity"),
        "selected_state": request.GET.getlist("state"),
        "teams": Team.objects.filter(pk__in=export_teams(principal)).order_by("name"),
        "exports": selectors.export_list(principal=principal)[:20],
        "report_query": request.GET.urlencode(),
    }
    return render(request, "exports/export_list.html", context)


@login_required
def export_detail_page(request: HttpRequest, export_id: int) -> HttpResponse:
    export = selectors.export_get_for_principal(
        principal=principal_for_request(request), export_id=export_id
    )
    if getattr(request, "htmx", False):
        return render(request, "exports/_export.html", {"export": export})
    return render(request, "exports/export.html", {"export": export})


@login_required
def export_download(request: HttpRequest, export_id: int) -> HttpResponseBase:
    export = selectors.export_get_for_principal(
        principal=principal_for_request(request), export_id=export_id
    )
    return export_file_response(export)


@login_required
def export_report(request: HttpRequest) -> HttpResponseBase:
    """The report as an HTML page for the browser's print (same template as the PDF);
    recorded as an export like any other."""
    params = request.GET.copy()
    params["format"] = ExportFormat.HTML
    return export_response(
        principal=principal_for_request(request), params=params, always_stream=True
    )
