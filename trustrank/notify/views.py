"""The webhooks pages of a team admin (beside the API keys): add, change the events of,
disable, delete and ping a webhook, and see its recent deliveries."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from trustrank.accounts.models import Team
from trustrank.accounts.principal import principal_for_request
from trustrank.notify import selectors
from trustrank.notify.models import NotifyEventName, WebhookFormat
from trustrank.notify.services.webhooks import (
    ADMIN,
    WebhookInvalid,
    webhook_create,
    webhook_delete,
    webhook_ping,
    webhook_update,
)

RECENT_DELIVERIES = 50
ACTIONS = ("delete", "ping", "enable", "disable")


class WebhookForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), required=False)
    url = forms.CharField(max_length=2048, label="URL",
                          help_text="http or https; the site refuses internal addresses.")
    events = forms.MultipleChoiceField(choices=NotifyEventName.choices,
                                       widget=forms.CheckboxSelectMultiple)
    format = forms.ChoiceField(choices=WebhookFormat.choices, initial=WebhookFormat.JSON)
    secret = forms.CharField(
        max_length=1024, widget=forms.PasswordInput(render_value=False),
        help_text="Signs each body (X-TrustRank-Signature); for Jira, the API token. "
        "Never shown again.",
    )
    jira_project_key = forms.CharField(max_length=64, required=False)
    jira_user = forms.CharField(max_length=255, required=False)

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        team_field: Any = self.fields["team"]
        team_field.queryset = teams
        if len(list(teams[:2])) == 1:
            team_field.empty_label = None
            team_field.initial = teams[0].pk


class EventsForm(forms.Form):
    events = forms.MultipleChoiceField(choices=NotifyEventName.choices,
                                       widget=forms.CheckboxSelectMultiple)


def _form_data(form: forms.Form) -> dict[str, Any]:
    data = {k: form.cleaned_data[k] for k in ("url", "events", "format", "secret")}
    if form.cleaned_data["format"] == WebhookFormat.JIRA:
        data.update({k: form.cleaned_data[k] for k in ("jira_project_key", "jira_user")})
    if form.cleaned_data.get("team") is not None:
        data["team"] = form.cleaned_data["team"].pk
    return data


def _add_error(form: forms.Form, exc: WebhookInvalid) -> None:
    field = exc.param if exc.param in form.fields else None
    form.add_error(field, str(exc))


@login_required
def webhooks_page(request: HttpRequest) -> HttpResponse:
    principal = principal_for_request(request)
    teams = Team.objects.filter(pk__in=principal.teams_with(ADMIN))
    form = WebhookForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            hook = webhook_create(principal=principal, data=_form_data(form))
        except WebhookInvalid as exc:
            _add_error(form, exc)
        else:
            return redirect("webhook", webhook_id=hook.pk)
    hooks = selectors.webhook_list(principal=principal)
    return render(request, "notify/webhooks.html",
                  {"form": form, "hooks": hooks, "is_admin": teams.exists()})


@login_required
def webhook_page(request: HttpRequest, webhook_id: int) -> HttpResponse:
    principal = principal_for_request(request)
    hook = selectors.webhook_get_for_principal(principal=principal, webhook_id=webhook_id)
    form = EventsForm(request.POST or None, initial={"events": hook.events})
    if request.method == "POST" and form.is_valid():
        try:
            webhook_update(webhook=hook, data={"events": form.cleaned_data["events"]})
        except WebhookInvalid as exc:
            _add_error(form, exc)
        else:
            return redirect("webhook", webhook_id=hook.pk)
    deliveries = list(selectors.delivery_list(webhook=hook)[:RECENT_DELIVERIES])
    return render(request, "notify/webhook.html",
                  {"hook": hook, "form": form, "deliveries": deliveries})


@login_required
def webhook_deliveries_fragment(request: HttpRequest, webhook_id: int) -> HttpResponse:
    """The deliveries table alone (the page refreshes it with htmx)."""
    hook = selectors.webhook_get_for_principal(
        principal=principal_for_request(request), webhook_id=webhook_id
    )
    deliveries = list(selectors.delivery_list(webhook=hook)[:RECENT_DELIVERIES])
    return render(request, "notify/_deliveries.html", {"hook": hook, "deliveries": deliveries})


@login_required
@require_POST
def webhook_action(request: HttpRequest, webhook_id: int, action: str) -> HttpResponse:
    if action not in ACTIONS:
        raise Http404(f"no action {action}")
    hook = selectors.webhook_get_for_principal(
        principal=principal_for_request(request), webhook_id=webhook_id
    )
    if action == "delete":
        webhook_delete(webhook=hook)
        return redirect("webhooks")
    if action == "ping":
        webhook_ping(webhook=hook)
    elif action in ("enable", "disable"):
        webhook_update(webhook=hook, data={"enabled": action == "enable"})
    return redirect("webhook", webhook_id=hook.pk)
