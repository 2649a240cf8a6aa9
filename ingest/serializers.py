from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ingest.models import IngestJob


class IngestJobSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True, allow_null=True)
    status_url = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by_label", read_only=True)
    # The name `requested_by` had before every job kind spelled it the same way.
    submitter_label = serializers.CharField(source="requested_by_label", read_only=True)
    duration_seconds = serializers.FloatField(read_only=True)

    class Meta:
        model = IngestJob
        fields = [
            "id",
            "kind",
            "status",
            "team",
            "params",
            "digest",
            "size_bytes",
            "content_type",
            "filename",
            "priority",
            "requested_by",
            "submitter_label",
            "attempts",
            "phase",
            "progress_done",
            "progress_total",
            "counts",
            "result",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "duration_seconds",
            "status_url",
        ]
        read_only_fields = fields

    def get_status_url(self, job: IngestJob) -> str:
        return f"/api/v1/jobs/{job.pk}"

    def to_representation(self, instance: IngestJob) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if getattr(instance, "is_foreign", False):
            # Another team's feed import: who ran it (team, key or person, file name) is
            # theirs to know.
            data.update(
                {"team": None, "requested_by": "", "submitter_label": "", "filename": ""}
            )
        return data
