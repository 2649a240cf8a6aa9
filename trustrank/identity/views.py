"""Identity pages: identities per environment with an expiry timeline, a certificate page,
an identity page with manual mapping and caller policies. (The upload page is a receiver:
ingest/views.py.)"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from trustrank.accounts.principal import principal_for_request
from trustrank.identity import engine, selectors, services
from trustrank.identity.filters import IdentityFilterSet
from trustrank.identity.forms import MappingForm, PolicyForm
from trustrank.lib.pages import HtmxHttpRequest, paginate

_CHART_WIDTH, _CHART_HEIGHT, _CHART_PAD = 720, 160, 24


def _timeline_chart(
    buckets: list[selectors.TimelineBucket], *, warn_until: datetime
) -> dict[str, Any]:
    """Bars of a server-rendered SVG: geometry is computed here, the template just draws."""
    peak = max((b.count for b in buckets), default=0) or 1
    slot = (_CHART_WIDTH - 2 * _CHART_PAD) / max(len(buckets), 1)
    usable = _CHART_HEIGHT - 2 * _CHART_PAD
    bars = []
    for index, bucket in enumerate(buckets):
        height = round(usable * bucket.count / peak) if bucket.count else 0
        bars.append(
            {
                "x": round(_CHART_PAD + index * slot + 2, 1),
                "y": _CHART_HEIGHT - _CHART_PAD - height,
                "width": round(slot - 4, 1),
                "height": height,
                "count": bucket.count,
                "label_x": round(_CHART_PAD + index * slot + slot / 2, 1),
                "start": bucket.start,
                "end": bucket.end,
                "title": ", ".join(bucket.labels[:20]),
                # Inside the expiry window: these already have "expiring" findings.
                "urgent": bucket.start < warn_until,
            }
        )
    return {
        "bars": bars,
        "width": _CHART_WIDTH,
        "height": _CHART_HEIGHT,
        "axis_y": _CHART_HEIGHT - _CHART_PAD,
        "total": sum(b.count for b in buckets),
    }


@login_required
def identities_page(request: HtmxHttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    environments = selectors.environment_names(principal=principal)
    environment = request.GET.get("environment") or (environments[0] if environments else "")
    identities = selectors.identity_list(principal=principal).filter(environment=environment)
    filterset = IdentityFilterSet(request.GET, queryset=identities)
    context: dict[str, Any] = {
        "environment": environment,
        "environments": environments,
        "filter": filterset,
        "hx_target": "#identities",
        **paginate(request, filterset.qs),
    }
    if request.htmx:
        return render(request, "identity/_identities.html", context)
    rules = services.strength_rules()
    context["bundles"] = [
        {
            "bundle": b,
            "warnings": engine.trust_bundle_warnings(trust_domains=b.trust_domains, rules=rules),
        }
        for b in selectors.bundle_list(principal=principal)
        if b.environment == environment
    ]
    context["now"] = timezone.now()
    context["chart"] = _timeline_chart(
        selectors.expiry_timeline(principal=principal, environment=environment),
        warn_until=timezone.now() + services.expiry_window(),
    )
    context["findings"] = selectors.open_findings(principal=principal, environment=environment)[
        :100
    ]
    context["certificates"] = selectors.certificate_list(principal=principal).filter(
        environment=environment
    )[:200]
    return render(request, "identity/identities.html", context)


@login_required
def certificate_page(request: HttpRequest, pk: int) -> HttpResponse:
    principal = principal_for_request(request)
    cert = selectors.certificate_get(principal=principal, certificate_id=pk)
    context = {
        "cert": cert,
        "findings": selectors.certificate_findings(certificate=cert),
    }
    return render(request, "identity/certificate.html", context)


@login_required
def identity_page(request: HttpRequest, pk: int) -> HttpResponse:
    principal = principal_for_request(request)
    identity = selectors.identity_get(principal=principal, identity_id=pk)
    form = MappingForm(
        initial={"service_name": identity.service_name, "namespace": identity.service_namespace}
    )
    if request.method == "POST":
        form = MappingForm(request.POST)
        if form.is_valid():
            try:
                services.identity_map_set(
                    identity=identity,
                    service_name=form.cleaned_data["service_name"],
                    namespace=form.cleaned_data["namespace"],
                    principal=principal,
                )
            except PermissionError as exc:
                raise PermissionDenied(str(exc)) from exc
            messages.success(request, "Mapping saved.")
            return redirect("identity:identity", pk=identity.pk)
    context = {
        "identity": identity,
        "form": form,
        "certificates": selectors.identity_certificates(identity=identity),
        "findings": selectors.finding_list(principal=principal).filter(
            environment=identity.environment, spiffe_id=identity.spiffe_id
        ),
    }
    return render(request, "identity/identity.html", context)


@login_required
def policies_page(request: HttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    form = PolicyForm()
    status = 200
    if request.method == "POST":
        form = PolicyForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                team = services.team_for_triage(principal=principal, team_hint=data["team"])
                services.service_policy_set(
                    team=team,
                    environment=data["environment"],
                    service_name=data["service_name"],
                    namespace=data["namespace"],
                    allowed_callers=data["allowed_callers"],
                    require_mtls=data["require_mtls"],
                    principal=principal,
                )
            except PermissionError as exc:
                raise PermissionDenied(str(exc)) from exc
            except ValueError as exc:  # services.InvalidEnvironment among them
                messages.error(request, str(exc))
                status = 400
            else:
                messages.success(request, "Policy saved.")
                return redirect("identity:policies")
        else:
            status = 400
    context = {"form": form, "policies": selectors.policy_list(principal=principal)}
    return render(request, "identity/policies.html", context, status=status)
