from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from trustrank.cluster.models import ClusterWorkload, ReplayMode, ReplayRun
from trustrank.risk.scheduling.strategies import STRATEGIES
from trustrank.risk.scheduling.timeline import POLICIES


class ReplayRunCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """Input of `POST /api/v1/replay-runs` (JSON, or multipart with `pods` and `nodes` files).
    `cluster` replays that cluster's stored pods and nodes instead of a trace."""

    mode = serializers.ChoiceField(choices=ReplayMode.choices, default=ReplayMode.INFLATION)
    strategies = serializers.ListField(
        child=serializers.ChoiceField(choices=STRATEGIES), required=False, default=list
    )
    seeds = serializers.IntegerField(min_value=1, max_value=20, default=3)
    policies = serializers.ListField(
        child=serializers.ChoiceField(choices=POLICIES), required=False, default=list
    )
    placement = serializers.ChoiceField(choices=STRATEGIES, default="fgd")
    compress = serializers.FloatField(min_value=0.001, default=1.0)
    node_fraction = serializers.FloatField(min_value=0.001, max_value=1.0, default=1.0)
    hints = serializers.JSONField(required=False, default=None)
    team = serializers.CharField(max_length=120, required=False, default="", allow_blank=True)
    cluster = serializers.CharField(
        max_length=120, required=False, default="", allow_blank=True
    )
    pods = serializers.FileField(required=False)
    nodes = serializers.FileField(required=False)


class ReplayRunSerializer(serializers.ModelSerializer[ReplayRun]):
    team = serializers.CharField(source="team.name", read_only=True)
    cluster = serializers.CharField(
        source="cluster.name", read_only=True, allow_null=True, default=None
    )
    progress_pct = serializers.IntegerField(read_only=True)
    status_url = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by_label", read_only=True)
    # The name `requested_by` had before every job kind spelled it the same way.
    submitter_label = serializers.CharField(source="requested_by_label", read_only=True)

    class Meta:
        model = ReplayRun
        fields = [
            "id",
            "team",
            "mode",
            "status",
            "phase",
            "progress_done",
            "progress_total",
            "progress_pct",
            "parameters",
            "trace_label",
            "cluster",
            "requested_by",
            "submitter_label",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            "result",
            "status_url",
        ]
        read_only_fields = fields

    def get_status_url(self, run: ReplayRun) -> str:
        return reverse("api-replay-run", kwargs={"run_id": run.pk})


class ClusterWorkloadSerializer(serializers.ModelSerializer[ClusterWorkload]):
    """A workload's declared priority beside the recommended one, with the reasons and the
    fingerprints of the diagnoses that counted."""

    declared = serializers.SerializerMethodField()
    recommended = serializers.SerializerMethodField()

    class Meta:
        model = ClusterWorkload
        fields = ["key", "namespace", "kind", "name", "gpus", "declared", "recommended",
                  "score", "tier", "direction", "disagrees", "reasons", "diagnoses",
                  "updated_at"]

    def get_declared(self, obj: ClusterWorkload) -> dict[str, Any]:
        return {"priority": obj.declared_priority,
                "priority_class": obj.declared_priority_class, "qos_class": obj.declared_qos}

    def get_recommended(self, obj: ClusterWorkload) -> dict[str, Any]:
        return {"priority": obj.recommended_priority, "qos_class": obj.recommended_qos}


class ClusterDiagnoseRequestedSerializer(serializers.Serializer[dict[str, Any]]):
    """The answer of `POST /api/v1/clusters/<cluster>/diagnoses`: the workloads show the
    diagnosis once their `updated_at` passes `requested_at`."""

    cluster = serializers.CharField()
    requested_at = serializers.DateTimeField()
