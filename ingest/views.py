from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from ingest.errors import SubmitRefused
from ingest.filters import IngestJobFilterSet
from ingest.models import JobStatus
from ingest.receivers import SUBMIT_STATUS
from ingest.selectors import job_get, job_list
from ingest.submit import certificates_submit, trust_bundle_submit
from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal, principal_for_request
from trustrank.accounts.selectors import TeamNotAllowed, TeamRequired, team_for_upload
from trustrank.identity.forms import CertificateUploadForm, TrustBundleUploadForm
from trustrank.lib.pages import HtmxHttpRequest, paginate
from trustrank.lib.params import param_rows


@login_required
def job_list_page(request: HtmxHttpRequest) -> HttpResponse:
    jobs = job_list(principal=principal_for_request(request)).defer("params", "result")
    filterset = IngestJobFilterSet(request.GET, queryset=jobs)
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
    return render(request, template, {"job": job, "param_rows": param_rows(job.params)})


def _team(principal: Principal, team_hint: str) -> Team:
    return team_for_upload(
        principal=principal, scope=Scope.CERTS_WRITE, what="certificates", team_hint=team_hint
    )


@login_required
def certificates_upload_page(request: HttpRequest) -> HttpResponse:
    """The identity app's upload page (route `identity:upload`): certificates or a trust
    bundle through the same submit functions as the API."""
    principal = principal_for_request(request)
    cert_form = CertificateUploadForm(prefix="cert")
    bundle_form = TrustBundleUploadForm(prefix="bundle")
    status = 200
    if request.method == "POST":
        which = request.POST.get("kind")
        try:
            if which == "bundle":
                bundle_form = TrustBundleUploadForm(request.POST, request.FILES, prefix="bundle")
                if bundle_form.is_valid():
                    data = bundle_form.cleaned_data
                    job = trust_bundle_submit(
                        principal=principal,
                        team=_team(principal, data["team"]),
                        body=data["file"].read(),
                        environment=data["environment"],
                        trust_domain=data["trust_domain"],
                        filename=data["file"].name or "",
                    )
                    messages.success(request, f"Trust bundle queued as job {job.pk}.")
                    for warning in job.params.get("warnings", []):
                        messages.warning(request, warning)
                    return redirect(f"/identities/?environment={job.params['environment']}")
            else:
                cert_form = CertificateUploadForm(request.POST, request.FILES, prefix="cert")
                if cert_form.is_valid():
                    data = cert_form.cleaned_data
                    job = certificates_submit(
                        principal=principal,
                        team=_team(principal, data["team"]),
                        body=data["file"].read(),
                        environment=data["environment"],
                        service=data["service"],
                        namespace=data["namespace"],
                        observed=data["observed"],
                        filename=data["file"].name or "",
                    )
                    messages.success(
                        request,
                        f"{job.params['certificates']} certificate(s) queued as job {job.pk}.",
                    )
                    return redirect(f"/identities/?environment={job.params['environment']}")
        except SubmitRefused as exc:
            messages.error(request, f"{exc.title}: {exc.detail}")
            status = SUBMIT_STATUS[exc.reason]
        except TeamNotAllowed as exc:
            messages.error(request, f"Forbidden: {exc}")
            status = 403
        except TeamRequired as exc:
            messages.error(request, f"Team required: {exc}")
            status = 400
        if status == 200:
            status = 400
    context = {"cert_form": cert_form, "bundle_form": bundle_form}
    return render(request, "identity/upload.html", context, status=status)
