"""The sign-in forms, throttled per account and per address."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from trustrank.accounts.services import login_failure_record, login_throttle_seconds


class _Throttled:
    """Refuse before the password is checked while the account or the address is throttled;
    record every failure."""

    throttled = False

    def clean(self) -> dict[str, Any]:
        form: Any = self
        username = str(form.data.get("username") or "")
        address = form.request.META.get("REMOTE_ADDR") if form.request is not None else None
        wait = login_throttle_seconds(username=username, address=address)
        if wait:
            self.throttled = True
            login_failure_record(username=username, address=address, throttled=True)
            raise forms.ValidationError(
                f"Too many failed sign-ins. Try again in {max(1, round(wait / 60))} minute(s).",
                code="throttled",
            )
        try:
            return super().clean()  # type: ignore[misc,no-any-return]
        except forms.ValidationError:
            login_failure_record(username=username, address=address)
            raise


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    pass
