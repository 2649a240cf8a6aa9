"""API shapes of the ranked queue and of ranking runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankingRun


class FactorSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    value = serializers.JSONField()
    effect = serializers.FloatField()
    source = serializers.CharField()
    confidence = serializers.ChoiceField(choices=["high", "medium", "low"])


def rank_fields(f: Finding) -> dict[str, Any]:
    """The ranking fields a finding carries in every API shape (nulls until ranked)."""
    ranked = f.ranked_or_none
    ctx: dict[str, Any] = ranked.context.data if ranked is not None else {}
    return {
        "rank": f.rank,
        "environment_rank": f.env_rank,
        "score": f.score,
        "decision": f.decision or None,
        "baseline": f.baseline_priority,
        "environment": ctx.get("environment") or None,
        "service": ctx.get("service") or None,
        **context_fields(ctx),
    }


def context_fields(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """What a ranked finding's stored context says about it, as every API shape names it
    (empty context: nulls and empty lists)."""
    return {
        "deployed": ctx.get("deployed"),
        "exposure": ctx.get("exposure"),
        "reachability": ctx.get("reachability"),
        "exploitation": ctx.get("exploitation"),
        "automatable": ctx.get("automatable"),
        "human_impact": ctx.get("human_impact"),
        "trust": ctx.get("trust"),
        "explanation": ctx.get("explanation", []),
        "path": ctx.get("path", []),
    }


class PrioritySerializer(serializers.Serializer[Finding]):
    """One entry of the ranked queue."""

    rank = serializers.IntegerField()
    environment_rank = serializers.IntegerField(allow_null=True)
    score = serializers.FloatField()
    decision = serializers.ChoiceField(
        choices=["immediate", "out-of-cycle", "scheduled", "defer"]
    )
    kind = serializers.CharField()
    finding = serializers.IntegerField()
    title = serializers.CharField()
    team = serializers.CharField()
    environment = serializers.CharField(allow_null=True)
    service = serializers.CharField(allow_null=True)
    project = serializers.DictField(allow_null=True)
    component = serializers.DictField(allow_null=True)
    vuln_id = serializers.CharField(allow_null=True)
    baseline = serializers.FloatField()
    deployed = serializers.BooleanField(allow_null=True)
    exposure = serializers.CharField(allow_null=True)
    reachability = serializers.CharField(allow_null=True)
    exploitation = serializers.CharField(allow_null=True)
    automatable = serializers.BooleanField(allow_null=True)
    human_impact = serializers.CharField(allow_null=True)
    trust = serializers.FloatField(allow_null=True)
    explanation = FactorSerializer(many=True)
    path = serializers.ListField(child=serializers.CharField())
    state = serializers.CharField()

    def to_representation(self, instance: Finding) -> dict[str, Any]:
        f = instance
        fields = rank_fields(f)
        return {
            **fields,
            "kind": f.kind,
            "finding": f.pk,
            "title": f.title if f.kind != "vulnerability" else (f.title or f.vuln_id),
            "team": f.team.name,
            "project": (
                {"id": f.project_id, "name": f.project.name,
                 "version": f.project_version.version if f.project_version else None}
                if f.project is not None else None
            ),
            "component": (
                {"name": f.component_name, "version": f.component_version,
                 "purl": f.component_purl}
                if f.component_name else None
            ),
            "vuln_id": f.vuln_id or None,
            "state": f.state,
        }


class RankingRunSerializer(serializers.ModelSerializer[RankingRun]):
    team = serializers.CharField(source="team.name")
    status_url = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by_label", read_only=True)

    class Meta:
        model = RankingRun
        fields = [
            "id", "team", "status", "phase", "trigger", "requested_by", "incremental",
            "not_before", "created_at", "started_at", "finished_at", "weights",
            "weights_version", "inputs_digest", "results_digest", "counts", "timings",
            "error", "previous", "status_url", "job_class", "attempts", "progress_done",
            "progress_total",
        ]

    def get_status_url(self, obj: RankingRun) -> str:
        return f"/api/v1/ranking-runs/{obj.pk}"


class RankChangeSerializer(serializers.ModelSerializer[RankChange]):
    finding_title = serializers.CharField(source="finding.title")
    finding_kind = serializers.CharField(source="finding.kind")
    vuln_id = serializers.CharField(source="finding.vuln_id")
    moved = serializers.IntegerField()

    class Meta:
        model = RankChange
        fields = [
            "finding", "finding_kind", "finding_title", "vuln_id", "previous_rank", "rank",
            "moved", "previous_score", "score", "previous_decision", "decision", "why", "at",
        ]


class RankingRunRequestSerializer(serializers.Serializer[Any]):
    team = serializers.CharField(required=False, allow_blank=True, default="")


class RankingChangesSerializer(serializers.Serializer[Any]):
    """What moved most in one run: the run, the run it is compared with, and the moves."""

    run = serializers.IntegerField()
    previous = serializers.IntegerField(allow_null=True)
    results = RankChangeSerializer(many=True)
