"""Reads for accounts: which team a write goes to."""

from __future__ import annotations

from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.lib.numbers import int_or_none


class TeamNotAllowed(PermissionError):
    """The principal may not write this kind of data to the team (or to any team)."""


class TeamRequired(ValueError):
    """The principal may write to several teams and named none."""


def team_for_upload(*, principal: Principal, scope: str, what: str, team_hint: str = "") -> Team:
    """The team an upload goes to: an API key writes to its own team; a person names the team
    (by name or id) when they may write to several. Used by every receiver, page and command
    that accepts evidence."""
    if principal.api_key is not None:
        if not principal.can(scope, principal.api_key.team_id):
            raise TeamNotAllowed(f"This key lacks the '{scope}' scope.")
        return principal.api_key.team
    allowed = Team.objects.filter(pk__in=principal.teams_with(scope))
    if team_hint:
        team = allowed.filter(name=team_hint).first()
        team_id = int_or_none(team_hint, minimum=1)
        if team is None and team_id is not None:
            team = allowed.filter(pk=team_id).first()
        if team is None:
            raise TeamNotAllowed(f"You may not upload {what} to team {team_hint!r}.")
        return team
    teams = list(allowed[:2])
    if not teams:
        raise TeamNotAllowed(f"You may not upload {what} to any team.")
    if len(teams) > 1:
        raise TeamRequired("You belong to several teams: name one with the `team` parameter.")
    return teams[0]
