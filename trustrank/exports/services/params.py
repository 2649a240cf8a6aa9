"""What an export asks for, read and checked from query parameters: the format, the findings
list's filters (FindingFilterSet, used through its class), `as_of`, `ranking_run`, `team`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from trustrank.accounts.models import Scope, Team
from trustrank.accounts.principal import Principal
from trustrank.exports.models import ExportFormat
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import Finding
from trustrank.inventory.models import ProjectVersion
from trustrank.lib.filters import REF_MAX_CHARS, ref_condition
from trustrank.lib.numbers import NumberInvalid, int_or_none, int_parse
from trustrank.ranking.models import RankingRun, RunStatus

# Either scope lets a caller export: auditors take exports away without reading the rest.
AUDIT_READ = "audit:read"
EXPORT_SCOPES = (Scope.READ, AUDIT_READ)

# Parameters the export itself takes; everything else must be a findings filter.
OWN_PARAMS = ("format", "as_of", "ranking_run", "team")
# Ignored when present: the findings page's cursor and htmx's marker.
IGNORED_PARAMS = ("after", "csrfmiddlewaretoken")


class ExportParamError(Exception):
    """A parameter the caller must fix; `param` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ExportRequest:
    format: str
    team_id: int
    filters: dict[str, list[str]] = field(default_factory=dict)
    as_of: datetime | None = None
    ranking_run_id: int | None = None


def _as_of(raw: str) -> datetime:
    value = parse_datetime(raw)
    if value is None:
        day = parse_date(raw)
        if day is None:
            raise ExportParamError("as_of", f"as_of {raw!r} is not an ISO date or date-time")
        # A date means the state at the end of that day (UTC).
        value = datetime.combine(day, time.max)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def _principal_user_id(principal: Principal) -> int | None:
    if principal.api_key is not None:
        return getattr(principal.api_key, "created_by_id", None)
    if principal.user is not None and principal.user.is_authenticated:
        return int(principal.user.pk)
    return None


def export_teams(principal: Principal) -> list[int]:
    return sorted({t for s in EXPORT_SCOPES for t in principal.teams_with(s)})


def _team_ref(raw: str, allowed: list[int]) -> int:
    """The team `raw` names, by id or by name, among those the caller may export from."""
    if "\x00" in raw or len(raw) > REF_MAX_CHARS:
        raise ExportParamError("team", "team must be a team id or name")
    ids = list(
        Team.objects.filter(ref_condition(raw), pk__in=allowed).values_list("pk", flat=True)
    )
    if len(ids) != 1:
        raise ExportParamError("team", f"no team {raw} you may export from")
    return int(ids[0])


def _project_version_ref(raw: str, team_id: int) -> str:
    """A project version filter as an id: the VEX product and a queued export read ids, and
    a Dependency-Track client names a version by its uuid. An id is kept as given."""
    if int_or_none(raw, minimum=1) is not None:
        return raw
    pv = ProjectVersion.objects.filter(
        ref_condition(raw, name_field=None, uuid_field="uuid"), project__team_id=team_id
    ).values_list("pk", flat=True).first()
    if pv is None:
        raise ExportParamError("project_version", f"no project version {raw} of your team")
    return str(pv)


def filter_params_check(filters: dict[str, list[str]]) -> None:
    """Raise ExportParamError naming the first unknown or invalid findings filter."""
    for name in FindingFilterSet.unknown_params(filters):
        known = ", ".join(sorted(FindingFilterSet.base_filters))
        raise ExportParamError(name, f"{name!r} is not a findings filter (use one of {known})")
    data = QueryDict(mutable=True)
    for name, values in filters.items():
        data.setlist(name, values)
    filterset = FindingFilterSet(data, queryset=Finding.objects.none())
    if not filterset.is_valid():
        name, errors = next(iter(filterset.errors.items()))
        raise ExportParamError(name, f"{name}: {' '.join(str(e) for e in errors)}")


def export_request_parse(
    *, principal: Principal, params: Any, default_format: str | None = None
) -> ExportRequest:
    """Read a QueryDict (or a dict of lists) into an ExportRequest; ExportParamError names
    the parameter at fault. The team is the one of `ranking_run`, else `team`, else the only
    team the principal may export from."""
    getlist = params.getlist if hasattr(params, "getlist") else (lambda k: list(params[k]))
    fmt = (params.get("format") or default_format or "").strip()
    if fmt not in ExportFormat.values:
        raise ExportParamError(
            "format", f"format must be one of {', '.join(ExportFormat.values)} (got {fmt!r})"
        )
    allowed = export_teams(principal)
    team_id: int | None = None
    raw_team = (params.get("team") or "").strip()
    if raw_team:
        team_id = _team_ref(raw_team, allowed)
    run_id: int | None = None
    raw_run = (params.get("ranking_run") or "").strip()
    if raw_run:
        try:
            run_id = int_parse(raw_run, minimum=1)
        except NumberInvalid as exc:
            raise ExportParamError("ranking_run", "ranking_run must be a ranking run id") from exc
        run = RankingRun.objects.filter(pk=run_id, team_id__in=allowed).first()
        if run is None or (team_id is not None and run.team_id != team_id):
            raise ExportParamError("ranking_run", f"no ranking run {run_id} of your team")
        if run.status != RunStatus.DONE:
            raise ExportParamError(
                "ranking_run", f"ranking run {run_id} is {run.status}, not done: it has no ranks"
            )
        team_id = run.team_id
    as_of = None
    raw_as_of = (params.get("as_of") or "").strip()
    if raw_as_of:
        as_of = _as_of(raw_as_of)
        if run_id is not None:
            raise ExportParamError("as_of", "give as_of or ranking_run, not both")
        if as_of > timezone.now():
            raise ExportParamError("as_of", "as_of is in the future")
    if team_id is None:
        if len(allowed) != 1:
            raise ExportParamError(
                "team",
                "team is required: you may export from several teams"
                if allowed
                else "you may export from no team",
            )
        team_id = allowed[0]
    filters: dict[str, list[str]] = {}
    for name in params:
        if name in OWN_PARAMS or name in IGNORED_PARAMS:
            continue
        values = [v for v in getlist(name) if v != ""]
        if values:
            filters[name] = values
    if "all" in filters.get("state", []):
        # `state=all`: every state, as `open=all` says on the findings list.
        del filters["state"]
        filters["open"] = ["all"]
    if filters.get("assignee") == ["me"]:
        # Resolved now: the job that writes a big export has no request to ask who "me" is.
        me = _principal_user_id(principal)
        if me is None:
            raise ExportParamError("assignee", "assignee=me needs a signed-in user or their key")
        filters["assignee"] = [str(me)]
    filter_params_check(filters)
    if "project_version" in filters:
        filters["project_version"] = [
            _project_version_ref(v, team_id) for v in filters["project_version"]
        ]
    return ExportRequest(
        format=fmt, team_id=team_id, filters=filters, as_of=as_of, ranking_run_id=run_id
    )
