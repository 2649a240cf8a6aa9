"""The gate policy on the team settings pages: `/settings/gate/`, and the same section on the
API keys page (where team admins manage their CI keys), through the `gate_policy_section`
template tag."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal, principal_for_request
from trustrank.gate.models import FailOn
from trustrank.gate.selectors import gate_policy_for
from trustrank.gate.services import GatePolicyForbidden, GatePolicyInvalid, gate_policy_set
from trustrank.lib.numbers import int_or_none


def gate_policy_rows(principal: Principal) -> list[dict[str, Any]]:
    """Each of the principal's teams with its policy and whether the principal may change it."""
    teams = Team.objects.filter(pk__in=principal.team_ids).order_by("name")
    return [
        {
            "team": t,
            "policy": gate_policy_for(team_id=t.pk),
            "can_edit": principal.can(Scope.ADMIN, t.pk),
        }
        for t in teams
    ]


@login_required
def gate_policy_page(request: HttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    errors: list[str] = []
    if request.method == "POST":
        team_id = int_or_none(request.POST.get("team", ""), minimum=1)
        if team_id is None or team_id not in principal.team_ids:
            return HttpResponse("no such team", status=404)
        values = {
            "fail_on": request.POST.get("fail_on", ""),
            "new_only": request.POST.get("new_only") == "on",
        }
        try:
            gate_policy_set(principal=principal, team_id=team_id, values=values,
                            reason=request.POST.get("reason", "").strip())
        except GatePolicyForbidden as exc:
            return HttpResponse(str(exc), status=403)
        except GatePolicyInvalid as exc:
            errors = [f"{k}: {v}" for k, v in exc.errors.items()]
        else:
            messages.success(request, "Gate policy saved.")
            back = request.POST.get("next", "")
            if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
                back = reverse("gate:policy")
            return HttpResponseRedirect(back or reverse("gate:policy"))
    return render(
        request,
        "gate/policy.html",
        {"rows": gate_policy_rows(principal), "errors": errors, "fail_on_choices": FailOn.choices,
         "next": reverse("gate:policy")},
        status=400 if errors else 200,
    )
