"""The sign-in forms, throttled per account and per address."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm

from trustrank.accounts.services import login_failure_record, login_throttle_seconds


def _throttle_username(form: Any) -> str:
    """The account a sign-in tries, as Django will look it up: the username field's own
    cleaning (strip, NFKC) and the user model's normalize_username. Keyed on the raw input,
    " alice", "alice " and "\\talice" would each get a fresh allowance of real guesses."""
    cleaned = form.cleaned_data.get("username")
    if cleaned is None:
        # The field refused the value (too long, say): no password is checked for it, but
        # the failure is still recorded, under the text as sent.
        cleaned = str(form.data.get("username") or "").strip()[:150]
    return str(get_user_model().normalize_username(cleaned))


class _Throttled:
    """Refuse before the password is checked while the account or the address is throttled;
    record every failure."""

    throttled = False

    def clean(self) -> dict[str, Any]:
        form: Any = self
        username = _throttle_username(form)
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
