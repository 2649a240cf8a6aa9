"""Writes for teams, memberships and API keys."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import (
    SITE_SCOPES,
    ApiKey,
    LoginFailure,
    Membership,
    Role,
    Scope,
    Team,
)

log = logging.getLogger(__name__)

# last_used_at is only written when older than this, so a busy exporter does not turn every
# request into a row update.
_LAST_USED_RESOLUTION = timedelta(seconds=60)

# api_key_authenticate_cached: SHA-256 of a secret -> (its key, monotonic time looked up).
# Per process, bounded (emptied when full: a process serves a handful of exporters' keys).
_KEY_CACHE: dict[str, tuple[ApiKey, float]] = {}
_KEY_CACHE_MAX = 1_000
_clock = time.monotonic


class InvalidScope(ValueError):
    pass


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    secret: str


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def team_get_or_create(*, name: str) -> Team:
    team, _ = Team.objects.get_or_create(name=name)
    return team


def membership_set(*, team: Team, user: Any, role: str) -> Membership:
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(Role.values)}")
    membership, _ = Membership.objects.update_or_create(
        team=team, user=user, defaults={"role": role}
    )
    return membership


def api_key_issue(
    *,
    team: Team,
    name: str,
    scopes: list[str],
    created_by: Any | None = None,
    allow_site_scopes: bool = False,
) -> IssuedKey:
    """`allow_site_scopes` is for the command line only: a team admin on the web or the API
    must never mint a key that changes data shared by every team."""
    site = sorted(set(scopes) & SITE_SCOPES)
    if site and not allow_site_scopes:
        raise InvalidScope(
            f"scope(s) {', '.join(site)} can only be granted by an operator on the command line"
        )
    unknown = sorted(set(scopes) - set(Scope.values) - SITE_SCOPES)
    if unknown:
        raise InvalidScope(
            f"unknown scope(s) {', '.join(unknown)}; use one of {', '.join(Scope.values)}"
        )
    if not scopes:
        raise InvalidScope("an API key needs at least one scope")
    prefix = secrets.token_hex(6)
    secret_part = secrets.token_urlsafe(32)
    secret = f"tr_{prefix}_{secret_part}"
    key = ApiKey.objects.create(
        team=team,
        name=name,
        prefix=prefix,
        digest=_digest(secret),
        scopes=sorted(set(scopes)),
        created_by=created_by,
    )
    return IssuedKey(api_key=key, secret=secret)


def api_key_authenticate(*, secret: str) -> ApiKey | None:
    """Return the active key for this secret, or None. Updates last_used_at coarsely."""
    parts = secret.split("_", 2)
    if len(parts) != 3 or parts[0] != "tr":
        return None
    key = ApiKey.objects.select_related("team").filter(prefix=parts[1]).first()
    if key is None or key.revoked_at is not None:
        return None
    if not hmac.compare_digest(key.digest, _digest(secret)):
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def api_key_authenticate_cached(*, secret: str) -> ApiKey | None:
    """As `api_key_authenticate`, for the telemetry receivers (a Collector sends several
    requests a second with one key): a key found good is trusted again for
    TRUSTRANK_API_KEY_CACHE_SECONDS without a query. So a key revoked (or given other
    scopes) by another process keeps working in this one for at most that long; one revoked
    by this process stops at once. A refused secret is never remembered: a key issued just
    now works at once."""
    ttl = settings.TRUSTRANK_API_KEY_CACHE_SECONDS
    if ttl <= 0:
        return api_key_authenticate(secret=secret)
    digest, now = _digest(secret), _clock()
    hit = _KEY_CACHE.get(digest)
    if hit is not None and now - hit[1] < ttl:
        return hit[0]
    key = api_key_authenticate(secret=secret)
    if key is None:
        _KEY_CACHE.pop(digest, None)
        return None
    if len(_KEY_CACHE) >= _KEY_CACHE_MAX:
        _KEY_CACHE.clear()
    _KEY_CACHE[digest] = (key, now)
    return key


def api_key_cache_clear() -> None:
    _KEY_CACHE.clear()


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    # This process forgets the key at once; others within TRUSTRANK_API_KEY_CACHE_SECONDS.
    for digest in [d for d, (key, _) in _KEY_CACHE.items() if key.pk == api_key.pk]:
        del _KEY_CACHE[digest]


# --- Sign-in throttling ---------------------------------------------------------------------


def login_failure_record(
    *, username: str, address: str | None, throttled: bool = False
) -> LoginFailure:
    """Record one failed sign-in (a log line and a row). Kept small and alone so the audit
    trail can move to the shared audit events without touching the throttle."""
    log.warning(
        "sign-in failed for %r from %s%s",
        username[:150],
        address or "?",
        " (throttled)" if throttled else "",
    )
    return LoginFailure.objects.create(
        username=username[:150].lower(), address=address, throttled=throttled, at=timezone.now()
    )


def login_throttle_seconds(*, username: str, address: str | None) -> int:
    """0 when a sign-in may be tried, else how long to wait: too many failures for this
    account, or from this address, within TRUSTRANK_LOGIN_WINDOW_SECONDS. Counted in the
    database, so every web process shares one count."""
    window = timedelta(seconds=settings.TRUSTRANK_LOGIN_WINDOW_SECONDS)
    since = timezone.now() - window
    recent = LoginFailure.objects.filter(at__gte=since)
    checks = [
        (recent.filter(username=username[:150].lower()), settings.TRUSTRANK_LOGIN_MAX_PER_ACCOUNT)
    ]
    if address:
        checks.append((recent.filter(address=address), settings.TRUSTRANK_LOGIN_MAX_PER_ADDRESS))
    wait = 0
    for failures, limit in checks:
        times = list(failures.order_by("-at").values_list("at", flat=True)[:limit])
        if len(times) >= limit:
            # Free again once the oldest of the last `limit` failures leaves the window.
            free_at = times[-1] + window
            wait = max(wait, math.ceil((free_at - timezone.now()).total_seconds()))
    return max(wait, 0)
