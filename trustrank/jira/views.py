"""The team admin page for Jira settings (`/settings/jira/`): one form per team the user
administers; the token field is always empty, and leaving it empty keeps the stored token.
And the finding page's "Open a Jira issue" button (`POST /findings/<id>/jira/`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.findings.selectors import finding_get_for_principal
from trustrank.jira.services.config import (
    JiraConfigError,
    JiraForbidden,
    jira_config_get,
    jira_config_public,
    jira_config_set,
)
from trustrank.jira.services.delivery import JiraNotConfigured, jira_issue_open
from trustrank.lib.numbers import int_or_none
from trustrank.lib.outbound import OutboundError, OutboundRefused
from trustrank.risk.inputs import DECISIONS


class JiraConfigForm(forms.Form):
    base_url = forms.CharField(label="Jira base URL", max_length=2048,
                               help_text="e.g. https://example.atlassian.net")
    project_key = forms.CharField(label="Project key", max_length=64)
    issue_type = forms.CharField(label="Issue type", max_length=64, initial="Bug")
    user = forms.CharField(
        label="User (email)", max_length=254, required=False,
        help_text="Jira Cloud: the account's email. Empty: the token is a Data Center "
        "personal access token.",
    )
    token = forms.CharField(
        label="API token", required=False, widget=forms.PasswordInput(render_value=False),
        help_text="Write-only. Leave empty to keep the stored token.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for decision in DECISIONS:
            self.fields[f"priority_{decision}"] = forms.CharField(
                label=f"Jira priority for {decision}", max_length=64, required=False
            )

    def values(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "base_url": data["base_url"],
            "project_key": data["project_key"],
            "issue_type": data["issue_type"],
            "user": data["user"],
            "token": data["token"],
            "priorities": {d: data.get(f"priority_{d}", "") for d in DECISIONS},
        }


def _initial(team_id: int) -> dict[str, Any]:
    public = jira_config_public(jira_config_get(team_id=team_id))
    initial = {k: public[k] for k in ("base_url", "project_key", "issue_type", "user")}
    for decision, name in public["priorities"].items():
        initial[f"priority_{decision}"] = name
    return {**initial, "_public": public}


@login_required
def jira_settings_page(request: HttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    teams = list(Team.objects.filter(pk__in=principal.teams_with(Scope.ADMIN)).order_by("name"))
    posted_team: int | None = None
    posted_form: JiraConfigForm | None = None
    if request.method == "POST":
        posted_team = int_or_none(request.POST.get("team", ""))
        if posted_team is None or posted_team not in {t.pk for t in teams}:
            return HttpResponse("no such team", status=404)
        posted_form = JiraConfigForm(request.POST, prefix=f"t{posted_team}")
        if posted_form.is_valid():
            try:
                jira_config_set(principal=principal, team_id=posted_team,
                                values=posted_form.values())
            except JiraForbidden as exc:
                return HttpResponse(str(exc), status=403)
            except JiraConfigError as exc:
                field = exc.field if exc.field in posted_form.fields else None
                if exc.field == "priorities":
                    field = None
                posted_form.add_error(field, f"{exc.field}: {exc}" if field is None else str(exc))
            else:
                messages.success(request, "Jira settings saved.")
                return HttpResponseRedirect(reverse("jira-settings"))
    rows = []
    for team in teams:
        initial = _initial(team.pk)
        public = initial.pop("_public")
        form = (posted_form if team.pk == posted_team and posted_form is not None
                else JiraConfigForm(initial=initial, prefix=f"t{team.pk}"))
        rows.append({"team": team, "form": form, "public": public})
    invalid = posted_form is not None and bool(posted_form.errors)
    return render(request, "jira/settings.html", {"rows": rows}, status=400 if invalid else 200)


@login_required
@require_POST
def finding_jira_open_submit(request: HttpRequest, finding_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    finding = finding_get_for_principal(principal=principal, finding_id=finding_id)
    page = reverse("findings:finding", args=[finding.pk])
    try:
        _status, detail, link = jira_issue_open(
            principal=principal, finding=finding, url=request.build_absolute_uri(page)
        )
    except JiraForbidden as exc:
        return HttpResponse(str(exc), status=403)
    except JiraNotConfigured as exc:
        messages.error(request, str(exc))
    except (OutboundError, OutboundRefused) as exc:
        messages.error(request, f"Jira did not answer: {exc}")
    else:
        if link is None:
            messages.error(request, detail)
        else:
            messages.success(request, detail)
    return HttpResponseRedirect(page)
