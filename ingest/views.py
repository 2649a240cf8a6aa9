from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from ingest.filters import IngestJobFilter
from ingest.models import JobStatus
from ingest.selectors import job_get, job_list
from trustrank.accounts.principal import principal_for_request
from trustrank.lib.pages import HtmxHttpRequest, paginate


@login_required
def job_list_page(request: HtmxHttpRequest) -> HttpResponse:
    jobs = job_list(principal=principal_for_request(request)).defer("params", "result")
    filterset = IngestJobFilter(request.GET, queryset=jobs)
    context = {"filter": filterset, "hx_target": "#jobs", **paginate(request, filterset.qs)}
    # Keep polling while anything shown is still moving.
    context["live"] = any(
        job.status in (JobStatus.QUEUED, JobStatus.RUNNING) for job in context["page_obj"]
    )
    if request.htmx:
        return render(request, "ingest/_jobs.html", context)
    return render(request, "ingest/jobs.html", context)


@login_required
def job_page(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = job_get(principal=principal_for_request(request), job_id=job_id)
    template = "ingest/_job.html" if request.htmx else "ingest/job.html"
    return render(request, template, {"job": job})
