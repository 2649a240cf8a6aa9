"""Who is asking: a logged-in user (roles in several teams) or an API key (one team)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trustrank.accounts.models import ROLE_SCOPES, ApiKey, Membership, scopes_with_implied


@dataclass(frozen=True)
class Principal:
    """Scopes per team id. Every selector filters by `team_ids`; every write checks `can`."""

    scopes_by_team: dict[int, frozenset[str]] = field(default_factory=dict)
    user: Any = None
    api_key: ApiKey | None = None

    @property
    def team_ids(self) -> frozenset[int]:
        return frozenset(self.scopes_by_team)

    def can(self, scope: str, team_id: int | None = None) -> bool:
        if team_id is None:
            return any(scope in scopes for scopes in self.scopes_by_team.values())
        return scope in self.scopes_by_team.get(team_id, frozenset())

    def teams_with(self, scope: str) -> list[int]:
        return sorted(t for t, scopes in self.scopes_by_team.items() if scope in scopes)

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"api-key:{self.api_key.name}"
        if self.user is not None and self.user.is_authenticated:
            return str(self.user.get_username())
        return "anonymous"


ANONYMOUS = Principal()


def principal_for_user(user: Any) -> Principal:
    if user is None or not user.is_authenticated:
        return ANONYMOUS
    rows = Membership.objects.filter(user=user).values_list("team_id", "role")
    return Principal(
        scopes_by_team={team_id: ROLE_SCOPES[role] for team_id, role in rows}, user=user
    )


def principal_for_key(api_key: ApiKey) -> Principal:
    return Principal(
        scopes_by_team={api_key.team_id: scopes_with_implied(api_key.scopes)}, api_key=api_key
    )


def principal_for_request(request: Any) -> Principal:
    """Works for Django and DRF requests; cached on the request."""
    cached = getattr(request, "_trustrank_principal", None)
    if cached is not None:
        return cached
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        principal = principal_for_key(auth)
    else:
        principal = principal_for_user(getattr(request, "user", None))
    request._trustrank_principal = principal
    return principal


@dataclass(frozen=True)
class SystemPrincipal(Principal):
    """Who acts when no person or key does: a management command run at the console
    (`kind="command"`) or a system job such as the feed schedule (`kind="system"`). Scopes
    are given explicitly, per team, so every service still checks `can` as for anyone."""

    name: str = "system"
    kind: str = "system"

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"


def principal_for_command(*, team_id: int, command: str, scopes: frozenset[str]) -> SystemPrincipal:
    """An operator running `manage.py <command>` for one team."""
    return SystemPrincipal(scopes_by_team={team_id: scopes}, name=command, kind="command")


def principal_for_system(*, team_id: int, name: str, scopes: frozenset[str]) -> SystemPrincipal:
    """A job nobody in particular started (a schedule, a sweep)."""
    return SystemPrincipal(scopes_by_team={team_id: scopes}, name=name, kind="system")
