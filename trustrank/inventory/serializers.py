from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trustrank.inventory.models import Component, Project, ProjectVersion, Sbom


class SbomSerializer(serializers.ModelSerializer):
    class Meta:
        model = Sbom
        fields = [
            "id",
            "spec_version",
            "format",
            "serial_number",
            "bom_version",
            "bom_timestamp",
            "tools",
            "described_component",
            "component_count",
            "dependency_count",
            "vulnerability_count",
            "digest",
            "created_at",
        ]


class ProjectVersionSerializer(serializers.ModelSerializer):
    current_sbom = SbomSerializer(read_only=True)

    class Meta:
        model = ProjectVersion
        fields = ["uuid", "version", "current_sbom", "created_at", "updated_at"]


class ProjectSerializer(serializers.ModelSerializer):
    """`risk` comes from the view (context "risks": project id -> ProjectRisk), computed for
    the whole page in one grouped query; None when the view did not compute it."""

    team = serializers.CharField(source="team.name")
    versions = ProjectVersionSerializer(many=True, read_only=True)
    risk = serializers.SerializerMethodField()

    class Meta:
        model = Project
        fields = ["id", "name", "team", "versions", "created_at", "risk"]

    def get_risk(self, project: Project) -> dict[str, Any] | None:
        risk = self.context.get("risks", {}).get(project.pk)
        return None if risk is None else risk.as_dict()


class ComponentSerializer(serializers.ModelSerializer):
    project_version = serializers.CharField(source="sbom.project_version.version")

    class Meta:
        model = Component
        fields = [
            "id",
            "project_version",
            "bom_ref",
            "parent_ref",
            "type",
            "group",
            "name",
            "version",
            "purl",
            "cpe",
            "hashes",
            "licenses",
            "supplier",
            "scope",
        ]
