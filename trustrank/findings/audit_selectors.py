"""Reads for the audit log: a principal's teams' events, newest first, and their chains."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from trustrank.accounts.models import Team
from trustrank.accounts.principal import Principal
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit_chain import ChainReport, audit_chain_verify
from trustrank.findings.services.audit_checkpoint import (
    audit_checkpoint_latest,
    audit_checkpoint_summary,
)


def audit_event_list(*, principal: Principal) -> QuerySet[AuditEvent]:
    """Every event of the principal's teams (site-wide feed events belong to no team and are
    not listed), newest first: id order is each team's chain order."""
    return (
        AuditEvent.objects.filter(team_id__in=principal.team_ids)
        .select_related("team", "finding__project")
        .order_by("-id")
    )


def audit_chains_for_principal(*, principal: Principal) -> list[dict[str, Any]]:
    """The chain report of each of the principal's teams (streams every event of them), and
    how each compares with the last signed checkpoint (None without one)."""
    teams = Team.objects.filter(pk__in=principal.team_ids).order_by("name")
    out = []
    checkpoint = audit_checkpoint_latest()
    for team in teams:
        report: ChainReport = audit_chain_verify(team_id=team.pk)
        out.append(
            {"team": team, "report": report,
             "checkpoint": audit_checkpoint_summary(team_id=team.pk, checkpoint=checkpoint)}
        )
    return out
