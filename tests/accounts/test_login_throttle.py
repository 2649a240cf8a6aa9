"""Password guessing is throttled per account and per address, and every failure is
recorded (a log line and a row)."""

from __future__ import annotations

import pytest
from django.test import Client

from trustrank.accounts.models import LoginFailure

pytestmark = pytest.mark.django_db


def _login(username: str, password: str, *, address: str = "203.0.113.7", path="/login/"):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


def test_guessing_one_accounts_password_is_throttled_then_refused_even_when_right(
    make_user, settings, caplog
):
    make_user("alice")
    limit = settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
    for i in range(limit):
        assert _login("alice", f"wrong-{i}").status_code == 200
    # The right password no longer works while throttled: the guesser learns nothing.
    throttled = _login("alice", "pw-alice")
    assert throttled.status_code == 429
    assert "Too many failed sign-ins" in throttled.content.decode()
    # From any address: the account itself is throttled.
    assert _login("alice", "pw-alice", address="198.51.100.9").status_code == 429
    assert LoginFailure.objects.filter(username="alice").count() == limit + 2
    assert LoginFailure.objects.filter(throttled=True).count() == 2
    assert "sign-in failed for 'alice' from 203.0.113.7" in caplog.text


def test_one_address_guessing_many_accounts_is_throttled(make_user, settings):
    settings.TRUSTRANK_LOGIN_MAX_PER_ADDRESS = 8
    make_user("bob")
    for i in range(8):
        _login(f"user{i}", "guess")
    assert _login("bob", "pw-bob").status_code == 429
    assert _login("bob", "pw-bob", address="192.0.2.1").status_code == 302


def test_the_throttle_lifts_after_the_window(make_user, settings):
    make_user("carol")
    for _ in range(settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT):
        _login("carol", "wrong")
    assert _login("carol", "pw-carol").status_code == 429
    from datetime import timedelta

    from django.utils import timezone

    LoginFailure.objects.update(
        at=timezone.now() - timedelta(seconds=settings.TRUSTRANK_LOGIN_WINDOW_SECONDS + 1)
    )
    assert _login("carol", "pw-carol").status_code == 302


def test_the_admin_sign_in_is_throttled_too(make_user, settings):
    for _ in range(settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT + 1):
        _login("root", "wrong", path="/admin/login/")
    assert LoginFailure.objects.filter(username="root", throttled=True).exists()


def test_a_hundred_fast_guesses_are_mostly_refused_unchecked(make_user, settings):
    make_user("dave")
    for i in range(100):
        _login("dave", f"guess-{i}")
    checked = LoginFailure.objects.filter(username="dave", throttled=False).count()
    assert checked == settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
