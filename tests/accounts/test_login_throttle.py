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


def test_the_admin_sign_in_answers_429_while_throttled_even_to_the_right_password(
    make_user, settings
):
    user = make_user("erin")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    limit = settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
    for i in range(limit):
        assert _login("erin", f"wrong-{i}", path="/admin/login/").status_code == 200
    throttled = _login("erin", "pw-erin", path="/admin/login/")
    assert throttled.status_code == 429
    assert "Too many failed sign-ins" in throttled.content.decode()
    # Failures at either door count for the one account.
    assert _login("erin", "pw-erin").status_code == 429


# Django strips the username and NFKC-normalises it before looking the account up, so each
# of these is a real guess at "frank": they must all count against "frank".
SAME_ACCOUNT = [" frank", "frank ", "\tfrank", "frank\n", "\uff46rank", " \uff46rank\t"]


@pytest.mark.parametrize("variant", SAME_ACCOUNT)
def test_a_username_variant_django_reads_as_the_same_account_shares_its_throttle(
    make_user, settings, variant
):
    make_user("frank")
    limit = settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
    for i in range(limit):
        assert _login("frank", f"wrong-{i}", address=f"198.51.100.{i}").status_code == 200
    assert _login(variant, "wrong-again", address="192.0.2.50").status_code == 429
    assert _login(variant, "pw-frank", address="192.0.2.51").status_code == 429


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_guesses_spread_over_username_variants_are_counted_as_one_account(
    make_user, settings, path
):
    user = make_user("grace")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    variants = ["grace", " grace", "grace ", "\tgrace", "\ufF47race", "grace\r\n"]
    limit = settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
    answers = [
        _login(name, "wrong", address=f"203.0.113.{i}", path=path).status_code
        for i, name in enumerate(variants)
    ]
    assert answers == [200] * limit + [429] * (len(variants) - limit)
    assert LoginFailure.objects.filter(username="grace", throttled=False).count() == limit
    # The right password, however spelled, is refused unchecked until the window passes.
    assert _login(" grace", "pw-grace", address="192.0.2.9", path=path).status_code == 429


def test_a_differently_spelled_account_is_not_throttled_by_anothers_failures(make_user, settings):
    make_user("heidi")
    make_user("heidi2")
    for i in range(settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT):
        _login(" heidi", f"wrong-{i}", address=f"198.51.100.{i}")
    assert _login("heidi2", "pw-heidi2", address="192.0.2.77").status_code == 302


def test_a_hundred_fast_guesses_are_mostly_refused_unchecked(make_user, settings):
    make_user("dave")
    for i in range(100):
        _login("dave", f"guess-{i}")
    checked = LoginFailure.objects.filter(username="dave", throttled=False).count()
    assert checked == settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT
