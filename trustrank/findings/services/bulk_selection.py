"""Which findings a bulk triage change reaches: ids checked against the caller's teams and
the triage scope, or a filter of the findings list checked for unknown keys before it
selects anything."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import Finding
from trustrank.findings.services.triage import TriageError, TriageForbidden


class BulkSelectionError(TriageError):
    """Ids that are not the caller's findings (unknown, or another team's)."""

    def __init__(self, message: str, *, ids: list[int], field: str = "ids") -> None:
        super().__init__(message, field=field)
        self.ids = ids


class BulkFilterError(TriageError):
    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__("the filter has invalid fields", field="filter")
        self.errors = errors


def filter_querydict(params: Any) -> QueryDict:
    """A filter given as JSON ({"kind": "identity"}, {"state": ["a", "b"]}, {"kev": true}) as
    the query string the FilterSet reads on the page and the API."""
    if isinstance(params, QueryDict):
        return params
    query = QueryDict(mutable=True)
    for key, value in (params or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        query.setlist(
            str(key),
            ["true" if v is True else "false" if v is False else "" if v is None else str(v)
             for v in values],
        )
    return query


def filter_params_check(params: Any) -> None:
    """BulkFilterError for a filter that is not an object of the findings list's filter names
    with text, number, boolean or null values (or lists of them): an unknown key would
    otherwise be no filter at all, and the change would reach every finding."""
    if not isinstance(params, dict):
        raise BulkFilterError({"": ["the filter must be an object of findings list filters"]})
    unknown = FindingFilterSet.unknown_params(params)
    if unknown:
        known = ", ".join(sorted(FindingFilterSet.base_filters))
        raise BulkFilterError(
            {name: [f"{name!r} is not a findings filter (use one of {known})"]
             for name in unknown}
        )
    for name, value in params.items():
        values = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, str | int | float | bool) for v in values):
            raise BulkFilterError({name: ["give a value or a list of values"]})


def bulk_selection(
    *, principal: Principal, ids: list[int] | None, filter_params: dict[str, Any] | None,
    user_id: int | None,
) -> tuple[Any, list[int] | None, dict[str, Any] | None, list[int]]:
    """(queryset of the selection, explicit ids or None, normalised filter or None,
    team ids the change may touch)."""
    triage_teams = principal.teams_with(Scope.TRIAGE)
    if ids is not None:
        wanted = sorted(set(ids))
        visible = dict(
            Finding.objects.filter(pk__in=wanted, team_id__in=principal.team_ids)
            .values_list("pk", "team_id")
        )
        unknown = [i for i in wanted if i not in visible]
        if unknown:
            raise BulkSelectionError(
                "no such finding in your teams: " + ", ".join(map(str, unknown[:50])),
                ids=unknown,
            )
        forbidden = [i for i in wanted if visible[i] not in triage_teams]
        if forbidden:
            raise TriageForbidden(
                "changing triage state needs the 'triage' scope in the team of findings "
                + ", ".join(map(str, forbidden[:50]))
            )
        teams = sorted(set(visible.values()))
        return Finding.objects.filter(pk__in=wanted), wanted, None, teams
    if not triage_teams:
        raise TriageForbidden("changing triage state needs the 'triage' scope")
    filter_params_check(filter_params)
    filterset = FindingFilterSet(
        filter_querydict(filter_params),
        queryset=Finding.objects.filter(team_id__in=triage_teams), user_id=user_id,
        team_ids=triage_teams,
    )
    if not filterset.is_valid():
        raise BulkFilterError({k: list(v) for k, v in filterset.errors.items()})
    return filterset.qs, None, filterset.cleaned_params(), triage_teams
