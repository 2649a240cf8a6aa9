from __future__ import annotations

from rest_framework import serializers

from ingest.models import IngestJob


class IngestJobSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    status_url = serializers.SerializerMethodField()
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
