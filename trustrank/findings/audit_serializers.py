"""The audit log's API shape: one event with its finding, project and chain links."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trustrank.findings.records import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    """Read-only: audit events are never written through the API."""

    at = serializers.DateTimeField(source="created_at")
    team = serializers.IntegerField(source="team_id", allow_null=True)
    team_name = serializers.SerializerMethodField()
    actor = serializers.CharField(source="actor_label")
    actor_user = serializers.IntegerField(source="actor_user_id", allow_null=True)
    actor_key = serializers.IntegerField(source="actor_key_id", allow_null=True)
    finding = serializers.IntegerField(source="finding_id", allow_null=True)
    finding_kind = serializers.SerializerMethodField()
    finding_title = serializers.SerializerMethodField()
    project = serializers.SerializerMethodField()
    project_name = serializers.SerializerMethodField()
    subject = serializers.SerializerMethodField()

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "team",
            "team_name",
            "actor",
            "actor_kind",
            "actor_user",
            "actor_key",
            "action",
            "finding",
            "finding_kind",
            "finding_title",
            "project",
            "project_name",
            "environment",
            "subject",
            "subject_type",
            "subject_id",
            "before",
            "after",
            "reason",
            "prev_digest",
            "digest",
        ]
        read_only_fields = fields

    def get_team_name(self, obj: AuditEvent) -> str:
        return obj.team.name if obj.team is not None else ""

    def get_finding_kind(self, obj: AuditEvent) -> str:
        return obj.finding.kind if obj.finding is not None else ""

    def get_finding_title(self, obj: AuditEvent) -> str:
        return (obj.finding.title or str(obj.finding)) if obj.finding is not None else ""

    def get_project(self, obj: AuditEvent) -> int | None:
        return obj.finding.project_id if obj.finding is not None else None

    def get_project_name(self, obj: AuditEvent) -> str:
        project = obj.finding.project if obj.finding is not None else None
        return project.name if project is not None else ""

    @extend_schema_field(
        {"type": "object", "properties": {"type": {"type": "string"}, "id": {"type": "string"}}}
    )
    def get_subject(self, obj: AuditEvent) -> dict[str, Any]:
        return {"type": obj.subject_type, "id": obj.subject_id}
