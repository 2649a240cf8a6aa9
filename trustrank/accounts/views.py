"""Team administration pages: API keys (issued once, listed by prefix, revocable)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_POST

from trustrank.accounts.forms import ThrottledAuthenticationForm
from trustrank.accounts.models import ApiKey, Scope, Team
from trustrank.accounts.principal import principal_for_request
from trustrank.accounts.services import api_key_issue, api_key_revoke

# Offered for new keys: every team scope but the earlier name of metrics:write (keys that
# hold telemetry:write keep working; a new key should carry the current name).
NEW_KEY_SCOPES = [
    (value, f"{label} ({value})")
    for value, label in Scope.choices
    if value != Scope.TELEMETRY_WRITE
]
# Checked when the page opens: reading is what most integrations start with.
DEFAULT_SCOPES = [Scope.READ]


class ApiKeyForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none())
    name = forms.CharField(max_length=120)
    scopes = forms.MultipleChoiceField(
        choices=NEW_KEY_SCOPES, widget=forms.CheckboxSelectMultiple, initial=DEFAULT_SCOPES,
        help_text="Give a key only what its job needs: a CI pipeline sbom:write, a collector "
        "traces:write or metrics:write, a dashboard read.",
    )

    def __init__(self, *args: object, teams: QuerySet[Team], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        team_field: Any = self.fields["team"]
        team_field.queryset = teams
        only = list(teams[:2])
        if len(only) == 1:
            # One team to choose from: choose it (no empty "---------" option to pick first).
            team_field.empty_label = None
            team_field.initial = only[0].pk


def _admin_teams(request: HttpRequest) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=principal_for_request(request).teams_with(Scope.ADMIN))


@login_required
def api_keys_page(request: HttpRequest) -> HttpResponse:
    teams = _admin_teams(request)
    issued = None
    if request.method == "POST":
        form = ApiKeyForm(request.POST, teams=teams)
        if form.is_valid():
            issued = api_key_issue(
                team=form.cleaned_data["team"],
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                created_by=request.user,  # type: ignore[arg-type]
            )
            form = ApiKeyForm(teams=teams)
    else:
        form = ApiKeyForm(teams=teams)
    # Auditors see their teams' keys too (names, scopes, use; never a secret), without the
    # means to issue or revoke one.
    principal = principal_for_request(request)
    readable = {*principal.teams_with(Scope.ADMIN), *principal.teams_with(Scope.AUDIT_READ)}
    keys = ApiKey.objects.filter(team_id__in=readable).select_related("team", "created_by")
    return render(
        request,
        "accounts/api_keys.html",
        {
            "form": form,
            "keys": keys,
            "issued": issued,
            "admin_team_ids": set(principal.teams_with(Scope.ADMIN)),
        },
    )


@login_required
@require_POST
def api_key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    key = ApiKey.objects.filter(pk=key_id, team__in=_admin_teams(request)).first()
    if key is None:
        raise Http404("No such key.")
    api_key_revoke(api_key=key)
    return redirect("api-keys")


class ThrottledLoginView(LoginView):
    """Django's sign-in, answering 429 while the account or address is throttled."""

    form_class = ThrottledAuthenticationForm
    template_name = "accounts/login.html"

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = 429
        return response


@require_GET
@cache_control(max_age=86_400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """`/favicon.ico` for browsers and tools that ask for it without reading the page's
    <link rel="icon">: a temporary redirect, since the static URL changes with the file."""
    return redirect(static("favicon.svg"))

