"""Reads for findings of every kind. Every query is scoped to the principal's teams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet
from django.http import Http404

from trustrank.accounts.principal import Principal
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent, BulkTriageJob, Comment

# Counting stops here on the list page: "10,000+" is as useful as the exact figure and
# costs a bounded index scan instead of a full count over a million rows.
COUNT_CAP = 10_000


def finding_list(*, principal: Principal) -> QuerySet[Finding]:
    return finding_list_for_teams(principal.team_ids)


def finding_list_for_teams(team_ids: Iterable[int]) -> QuerySet[Finding]:
    """`finding_list` of a principal of these teams (a job that acts for one)."""
    return (
        Finding.objects.filter(team_id__in=list(team_ids))
        .select_related(
            "project", "project_version", "service", "ranked__context", "assignee", "due"
        )
        .order_by("-baseline_priority", "-id")
    )


def finding_get_for_principal(*, principal: Principal, finding_id: Any) -> Finding:
    try:
        pk = int(finding_id)
    except (TypeError, ValueError) as exc:
        raise Http404("no such finding") from exc
    finding = (
        Finding.objects.filter(pk=pk, team_id__in=principal.team_ids)
        .select_related(
            "project", "project_version", "advisory", "component", "service", "certificate",
            "ranked__context", "assignee", "due",
        )
        .defer("certificate__der")
        .first()
    )
    if finding is None:
        raise Http404("no such finding")
    return finding


def finding_audit_trail(*, finding: Finding) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(finding=finding, team_id=finding.team_id).order_by(
        "created_at", "id"
    )


def audit_usernames(*, events: list[AuditEvent]) -> dict[str, str]:
    """Usernames of the assignees the events name, by id as text (for templates)."""
    from django.contrib.auth import get_user_model

    ids: set[int] = {
        int(side["assignee"]) for ev in events for side in (ev.before, ev.after)
        if isinstance(side, dict) and isinstance(side.get("assignee"), int)
    }
    return {
        str(pk): name
        for pk, name in get_user_model().objects.filter(pk__in=ids).values_list("pk", "username")
    }


TRIAGE_KEYS = ("state", "justification", "response", "detail", "assignee", "due_date")


def finding_changes_since(*, finding: Finding, version: int) -> list[dict[str, Any]]:
    """Who changed what on the finding after the caller's version: the audit events whose
    `after` carries a newer version, each with the triage fields it changed."""
    from django.contrib.auth import get_user_model

    events = list(
        AuditEvent.objects.filter(
            finding=finding, team_id=finding.team_id, after__version__gt=version
        ).order_by("created_at", "id")
    )
    user_ids = {
        e.get(key, {}).get("assignee")
        for ev in events
        for key, e in (("before", ev.before), ("after", ev.after))
    } - {None}
    names = dict(
        get_user_model().objects.filter(pk__in=user_ids).values_list("pk", "username")
    )

    def show(key: str, value: Any) -> Any:
        if key == "assignee":
            return names.get(value, value)
        return value

    out = []
    for ev in events:
        fields = [
            {"field": k, "before": show(k, ev.before.get(k)), "after": show(k, ev.after.get(k))}
            for k in TRIAGE_KEYS
            if k in ev.after and ev.before.get(k) != ev.after.get(k)
        ]
        out.append(
            {
                "actor": ev.actor_label,
                "action": ev.action,
                "at": ev.created_at.isoformat(),
                "version": ev.after.get("version"),
                "reason": ev.reason,
                "fields": fields,
            }
        )
    return out


def finding_comments(*, finding: Finding) -> QuerySet[Comment]:
    return Comment.objects.filter(finding=finding).order_by("created_at", "id")


def capped_count(qs: QuerySet[Any], *, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(count, capped): counts at most cap + 1 rows."""
    n = qs.order_by()[: cap + 1].count()
    return min(n, cap), n > cap


def bulk_triage_job_get_for_principal(*, principal: Principal, job_id: Any) -> BulkTriageJob:
    """A bulk triage job whose teams are all the principal's."""
    try:
        pk = int(job_id)
    except (TypeError, ValueError) as exc:
        raise Http404("no such bulk triage job") from exc
    job = BulkTriageJob.objects.filter(
        pk=pk, team_ids__contained_by=list(principal.team_ids)
    ).first()
    if job is None:
        raise Http404("no such bulk triage job")
    return job
