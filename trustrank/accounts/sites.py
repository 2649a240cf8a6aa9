"""The admin site, whose sign-in is throttled and answered like the site's own."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from trustrank.accounts.forms import ThrottledAdminAuthenticationForm


class TrustRankAdminSite(admin.AdminSite):
    login_form = ThrottledAdminAuthenticationForm

    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().login(request, extra_context)
        # A TemplateResponse still carries its form: 429 while throttled, as /login/ answers,
        # so a client (or a scanner counting 200s) sees it is being refused.
        form = (getattr(response, "context_data", None) or {}).get("form")
        if getattr(form, "throttled", False):
            response.status_code = 429
        return response
