"""Reads for the inventory; every one is scoped to what the principal may see."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import (
    Avg,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Prefetch,
    Q,
    QuerySet,
)
from django.http import Http404
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES, Severity
from trustrank.findings.models import Finding
from trustrank.findings.selectors import finding_list
from trustrank.inventory.models import Component, Project, ProjectVersion, Sbom

# The findings list's contextual order: the ranked in their team's queue order (the queue key,
# the finding breaking ties, as the ranking engine orders them; the stored rank is the one of
# the run that last wrote the row), then the unranked by baseline priority.
QUEUE_ORDER = (
    F("ranked__qkey").asc(nulls_last=True), F("ranked__finding_id").asc(nulls_last=True),
    F("baseline_priority").desc(), F("id").desc(),
)



def project_list(*, principal: Principal) -> QuerySet[Project]:
    versions = ProjectVersion.objects.select_related("current_sbom").order_by("-updated_at")
    return (
        Project.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .prefetch_related(Prefetch("versions", queryset=versions))
        .order_by("name")
    )


def project_get(*, principal: Principal, project_id: int) -> Project:
    """The one access helper for a project: 404 for anything outside the principal's teams."""
    project = project_list(principal=principal).filter(pk=project_id).first()
    if project is None:
        raise Http404("No such project.")
    return project


def project_sbom_history(*, project: Project) -> QuerySet[Sbom]:
    return (
        Sbom.objects.filter(project_version__project=project)
        .select_related("project_version", "job")
        .order_by("-created_at")
    )


def project_components(*, project: Project, version: str | None = None) -> QuerySet[Component]:
    """Components of the current SBOM of each version of the project (or of one version)."""
    current = ProjectVersion.objects.filter(project=project, current_sbom__isnull=False)
    if version is not None:
        current = current.filter(version=version)
    sbom_ids = current.values("current_sbom_id")
    return (
        Component.objects.filter(sbom_id__in=sbom_ids)
        .select_related("sbom__project_version")
        .order_by("name", "version", "pk")
    )


# --- risk: what a project's findings say (issue: what auditors take away) -------------------

MTTR_WINDOW_DAYS = 90
DECISION_KEYS = ("immediate", "out-of-cycle", "scheduled", "defer")


@dataclass(frozen=True)
class ProjectRisk:
    """Open findings of a project in counts: by ranking decision (unranked apart), by
    severity, KEV-listed and overdue (open past their due date)."""

    open_total: int
    by_decision: dict[str, int]
    by_severity: dict[str, int]
    kev: int
    overdue: int

    @property
    def highest_decision(self) -> str | None:
        return next((d for d in DECISION_KEYS if self.by_decision.get(d)), None)

    @property
    def highest_decision_count(self) -> int:
        d = self.highest_decision
        return 0 if d is None else self.by_decision[d]

    def as_dict(self) -> dict[str, Any]:
        return {
            "open": self.open_total,
            "by_decision": self.by_decision,
            "highest_decision": self.highest_decision,
            "by_severity": self.by_severity,
            "kev": self.kev,
            "overdue": self.overdue,
        }


@dataclass(frozen=True)
class Mttr:
    """Mean time to remediate, in days, of the findings resolved in the window."""

    window_days: int
    days: float | None
    resolved: int
    by_severity: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_days": self.window_days,
            "days": self.days,
            "resolved": self.resolved,
            "by_severity": self.by_severity,
        }


@dataclass(frozen=True)
class ProjectRiskSummary:
    """The risk and the MTTR; also readable as a mapping (`summary["kev"]`), the shape the
    API returns."""

    risk: ProjectRisk
    mttr: Mttr

    def as_dict(self) -> dict[str, Any]:
        return {**self.risk.as_dict(), "mttr": self.mttr.as_dict()}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    @property
    def open_total(self) -> int:
        return self.risk.open_total

    @property
    def by_decision(self) -> dict[str, int]:
        return self.risk.by_decision

    @property
    def by_severity(self) -> dict[str, int]:
        return self.risk.by_severity

    @property
    def kev(self) -> int:
        return self.risk.kev

    @property
    def overdue(self) -> int:
        return self.risk.overdue


def _risk_aggregates(today: date) -> dict[str, Any]:
    aggregates: dict[str, Any] = {
        "open_total": Count("id"),
        "kev": Count("id", filter=Q(in_kev=True)),
        "overdue": Count("id", filter=Q(due__due_date__lt=today)),
        "unranked": Count("id", filter=Q(ranked__isnull=True)),
    }
    for d in DECISION_KEYS:
        aggregates[f"d_{d}"] = Count("id", filter=Q(ranked__decision=d))
    for s in Severity:
        aggregates[f"s_{s.value}"] = Count("id", filter=Q(severity=s.value))
    return aggregates


def _risk_from_row(row: Mapping[str, Any]) -> ProjectRisk:
    by_decision = {d: row.get(f"d_{d}") or 0 for d in DECISION_KEYS}
    by_decision["unranked"] = row.get("unranked") or 0
    return ProjectRisk(
        open_total=row.get("open_total") or 0,
        by_decision=by_decision,
        by_severity={s.value: row.get(f"s_{s.value}") or 0 for s in Severity},
        kev=row.get("kev") or 0,
        overdue=row.get("overdue") or 0,
    )


def _project_findings(project: Project) -> QuerySet[Finding]:
    # The team too: the project's id alone would do, but every finding query names its team.
    return Finding.objects.filter(team_id=project.team_id, project_id=project.pk)


def project_risk(*, project: Project, today: date | None = None) -> ProjectRisk:
    today = today or timezone.now().date()
    row = (
        _project_findings(project)
        .filter(state__in=OPEN_STATES)
        .aggregate(**_risk_aggregates(today))
    )
    return _risk_from_row(row)


def project_mttr(
    *, project: Project, now: datetime | None = None, window_days: int = MTTR_WINDOW_DAYS
) -> Mttr:
    """Mean of resolved_at − first_seen over the project's findings resolved in the last
    `window_days` days, overall and by severity. One grouped query."""
    now = now or timezone.now()
    rows = list(
        _project_findings(project)
        .exclude(state__in=OPEN_STATES)
        .filter(resolved_at__isnull=False, resolved_at__gte=now - timedelta(days=window_days))
        .values("severity")
        .annotate(
            n=Count("id"),
            mean=Avg(
                ExpressionWrapper(F("resolved_at") - F("first_seen"), output_field=DurationField())
            ),
        )
        .order_by()
    )
    by_severity: dict[str, dict[str, Any]] = {}
    total = 0
    weighted = 0.0
    for r in rows:
        mean_days = r["mean"].total_seconds() / 86400
        by_severity[r["severity"]] = {"days": round(mean_days, 2), "resolved": r["n"]}
        total += r["n"]
        weighted += mean_days * r["n"]
    ordered = {s.value: by_severity[s.value] for s in Severity if s.value in by_severity}
    return Mttr(
        window_days=window_days,
        days=round(weighted / total, 2) if total else None,
        resolved=total,
        by_severity=ordered,
    )


def project_risk_summary(
    project: Project, *, now: datetime | None = None
) -> ProjectRiskSummary:
    """Open findings by decision, by severity, KEV and overdue counts, and MTTR by severity:
    two aggregate queries, whatever the number of findings."""
    now = now or timezone.now()
    return ProjectRiskSummary(
        risk=project_risk(project=project, today=now.date()),
        mttr=project_mttr(project=project, now=now),
    )


class OpenPoint(NamedTuple):
    day: date
    open: int


def project_open_over_time(
    project: Project, days: int = 90, *, today: date | None = None
) -> list[OpenPoint]:
    """Findings open at the end of each of the last `days` days (UTC), today included: opened
    (first_seen) by then and not resolved (resolved_at) by then. Computed in SQL over the
    days of generate_series, from per-day counts of openings and resolutions, so the cost is
    one pass over the project's findings however many days are asked for.

    A finding reopened after a resolution has no resolved_at any more: it counts as open
    from its first sighting (the history of reopenings lives in the audit trail)."""
    today = today or timezone.now().date()
    start = today - timedelta(days=days - 1)
    sql = """
        WITH f AS (
            SELECT (first_seen AT TIME ZONE 'UTC')::date AS opened,
                   (resolved_at AT TIME ZONE 'UTC')::date AS closed
            FROM findings_finding
            WHERE team_id = %(team)s AND project_id = %(project)s
        ),
        opened AS (SELECT opened AS day, count(*) AS n FROM f GROUP BY opened),
        closed AS (
            SELECT closed AS day, count(*) AS n FROM f WHERE closed IS NOT NULL GROUP BY closed
        ),
        days AS (
            SELECT d::date AS day
            FROM generate_series(%(start)s::date, %(end)s::date, interval '1 day') AS d
        )
        SELECT days.day,
               (SELECT coalesce(sum(n), 0) FROM opened WHERE opened.day <= days.day)
             - (SELECT coalesce(sum(n), 0) FROM closed WHERE closed.day <= days.day)
        FROM days ORDER BY days.day
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql, {"team": project.team_id, "project": project.pk, "start": start, "end": today}
        )
        return [OpenPoint(day=d, open=int(n)) for d, n in cursor.fetchall()]


def project_risk_for_projects(
    *, projects: Iterable[Project], today: date | None = None
) -> dict[int, ProjectRisk]:
    """The risk of each of a page's projects, in one grouped query."""
    today = today or timezone.now().date()
    by_team: dict[int, int] = {p.pk: p.team_id for p in projects}
    if not by_team:
        return {}
    rows = (
        Finding.objects.filter(
            project_id__in=list(by_team),
            team_id__in=set(by_team.values()),
            state__in=OPEN_STATES,
        )
        .values("project_id")
        .annotate(**_risk_aggregates(today))
        .order_by()
    )
    found = {r["project_id"]: _risk_from_row(r) for r in rows}
    empty = _risk_from_row({})
    return {pk: found.get(pk, empty) for pk in by_team}


def project_findings(*, principal: Principal, project: Project) -> QuerySet[Finding]:
    """The project's findings as the findings list shows them (the list's FilterSet
    applies); the best contextual rank first, then the baseline priority."""
    return finding_list(principal=principal).filter(project_id=project.pk).order_by(
        *QUEUE_ORDER
    )
