from __future__ import annotations

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
    team = serializers.CharField(source="team.name")
    versions = ProjectVersionSerializer(many=True, read_only=True)

    class Meta:
        model = Project
        fields = ["id", "name", "team", "versions", "created_at"]


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
