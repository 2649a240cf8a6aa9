"""Explicit API shapes for findings."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trustrank.findings.models import VEX_RESPONSES, Finding, Justification, TriageState


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
            "category",
            "source",
            "fingerprint",
            "title",
            "environment",
            "service",
            "certificate",
            "identity",
            "spiffe_id",
            "evidence",
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
        # Present on every finding (blank for kinds other than vulnerability).
        extra_kwargs = {"vuln_id": {"required": True}, "match_status": {"required": True}}

    def to_representation(self, instance: Finding) -> dict[str, Any]:
        data = dict(super().to_representation(instance))
        from trustrank.ranking.serializers import rank_fields

        ranking = rank_fields(instance)
        # The finding's own environment and service stay as they are; where it was ranked
        # (its most urgent deployment) comes as rank_environment / rank_service.
        data["rank_environment"] = ranking.pop("environment")
        data["rank_service"] = ranking.pop("service")
        data.update(ranking)
        return data

    def get_advisory(self, obj: Finding) -> dict[str, Any] | None:
        if not obj.vuln_id:
            return None
        advisory_id = obj.advisory_id or obj.vuln_id
        return {
            "id": advisory_id,
            "aliases": [a for a in obj.aliases if a != advisory_id],
            "summary": obj.title,
        }

    def get_component(self, obj: Finding) -> dict[str, Any] | None:
        if not obj.component_key and obj.component_id is None:
            return None
        return {
            "id": obj.component_id,
            "purl": obj.component_purl,
            "name": obj.component_name,
            "version": obj.component_version,
            "ecosystem": obj.ecosystem,
            "package": obj.package_name,
        }

    def get_project(self, obj: Finding) -> dict[str, Any] | None:
        if obj.project is None:
            return None
        return {"id": obj.project_id, "name": obj.project.name}

    def get_project_version(self, obj: Finding) -> dict[str, Any] | None:
        if obj.project_version is None:
            return None
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
