"""Writes for teams, memberships and API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from trustrank.accounts.models import SITE_SCOPES, ApiKey, Membership, Role, Scope, Team

# last_used_at is only written when older than this, so a busy exporter does not turn every
# request into a row update.
_LAST_USED_RESOLUTION = timedelta(seconds=60)


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


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
