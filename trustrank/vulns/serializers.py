"""Explicit API shapes for findings."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trustrank.parsers.cyclonedx_vulns import VEX_RESPONSES
from trustrank.vulns.models import Finding, Justification, TriageState


class FindingSerializer(serializers.ModelSerializer[Finding]):
    advisory = serializers.SerializerMethodField()
    component = serializers.SerializerMethodField()
    project = serializers.SerializerMethodField()
    project_version = serializers.SerializerMethodField()
    kev = serializers.SerializerMethodField()
    epss = serializers.SerializerMethodField()

    class Meta:
        model = Finding
        fields = [
            "id",
            "kind",
            "source",
            "fingerprint",
            "vuln_id",
            "advisory",
            "aliases",
            "component",
            "project",
            "project_version",
            "severity",
            "cvss_score",
            "kev",
            "epss",
            "baseline_priority",
            "state",
            "justification",
            "response",
            "detail",
            "match_status",
            "match_reason",
            "fixed_versions",
            "first_seen",
            "last_seen",
            "resolved_at",
            "auto_resolved",
        ]

    def get_advisory(self, obj: Finding) -> dict[str, Any]:
        advisory_id = obj.advisory_id or obj.vuln_id
        return {
            "id": advisory_id,
            "aliases": [a for a in obj.aliases if a != advisory_id],
            "summary": obj.title,
        }

    def get_component(self, obj: Finding) -> dict[str, Any]:
        return {
            "id": obj.component_id,
            "purl": obj.component_purl,
            "name": obj.component_name,
            "version": obj.component_version,
            "ecosystem": obj.ecosystem,
            "package": obj.package_name,
        }

    def get_project(self, obj: Finding) -> dict[str, Any]:
        return {"id": obj.project_id, "name": obj.project.name}

    def get_project_version(self, obj: Finding) -> dict[str, Any]:
        return {
            "id": obj.project_version_id,
            "version": obj.project_version.version,
            "uuid": str(obj.project_version.uuid),
        }

    def get_kev(self, obj: Finding) -> dict[str, Any]:
        return {"listed": obj.in_kev, "date_added": obj.kev_date_added}

    def get_epss(self, obj: Finding) -> dict[str, Any]:
        return {"probability": obj.epss, "percentile": obj.epss_percentile}


class TriageSerializer(serializers.Serializer[Any]):
    state = serializers.ChoiceField(choices=TriageState.choices)
    justification = serializers.ChoiceField(
        choices=Justification.choices, required=False, allow_blank=True, default=""
    )
    response = serializers.ListField(
        child=serializers.ChoiceField(choices=VEX_RESPONSES), required=False, default=list
    )
    detail = serializers.CharField(required=False, allow_blank=True, default="")
    reason = serializers.CharField()


class CommentSerializer(serializers.Serializer[Any]):
    body = serializers.CharField()
