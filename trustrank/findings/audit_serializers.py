"""The audit log's API shape: one event with its finding, project and chain links."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trustrank.findings.models import AuditEvent


class AuditEventSerializer(serializers.Serializer[AuditEvent]):
    """Read-only: audit events are never written through the API."""

    def to_representation(self, instance: AuditEvent) -> dict[str, Any]:
        e = instance
        finding = e.finding
        project = finding.project if finding is not None else None
        return {
            "id": e.pk,
            "at": e.created_at,
            "team": e.team_id,
            "team_name": e.team.name if e.team is not None else "",
            "actor": e.actor_label,
            "actor_kind": e.actor_kind,
            "actor_user": e.actor_user_id,
            "actor_key": e.actor_key_id,
            "action": e.action,
            "finding": e.finding_id,
            "finding_kind": finding.kind if finding is not None else "",
            "finding_title": (finding.title or str(finding)) if finding is not None else "",
            "project": project.pk if project is not None else None,
            "project_name": project.name if project is not None else "",
            "environment": e.environment,
            "subject": {"type": e.subject_type, "id": e.subject_id},
            "subject_type": e.subject_type,
            "subject_id": e.subject_id,
            "before": e.before,
            "after": e.after,
            "reason": e.reason,
            "prev_digest": e.prev_digest,
            "digest": e.digest,
        }
