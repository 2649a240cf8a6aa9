"""Shapes of the gate's answers, for the OpenAPI schema (the answers are built by
GateResult.as_json and the policy API; these serializers describe them)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class GateCountsSerializer(serializers.Serializer[Any]):
    """Open, unwaived, ranked vulnerability findings of the version by SSVC decision."""

    immediate = serializers.IntegerField()
    scheduled = serializers.IntegerField()
    defer = serializers.IntegerField()


# Not a Python name: declared by hand.
GateCountsSerializer._declared_fields["out-of-cycle"] = serializers.IntegerField()


class GateFindingSerializer(serializers.Serializer[Any]):
    finding = serializers.IntegerField()
    vuln_id = serializers.CharField()
    component = serializers.CharField()
    component_version = serializers.CharField()
    decision = serializers.CharField(allow_null=True)
    rank = serializers.IntegerField(allow_null=True)
    score = serializers.FloatField(allow_null=True)
    state = serializers.CharField()
    new = serializers.BooleanField(required=False, help_text="with the policy new_only")
    waiver = serializers.CharField(required=False, help_text="the waiver and who set it")


class GatePolicySerializer(serializers.Serializer[Any]):
    team = serializers.CharField()
    fail_on = serializers.ChoiceField(choices=["immediate", "out-of-cycle"])
    new_only = serializers.BooleanField()
    updated_at = serializers.DateTimeField(allow_null=True)
    updated_by = serializers.CharField(allow_null=True)


class GateUploadSerializer(serializers.Serializer[Any]):
    job = serializers.CharField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(required=False)


class GateResultSerializer(serializers.Serializer[Any]):
    pending = serializers.BooleanField(
        help_text="the ranking has not caught up with the version's latest upload; `pass` is "
        "then false"
    )
    reasons = serializers.ListField(child=serializers.CharField())
    counts = GateCountsSerializer()
    team = serializers.CharField()
    project = serializers.CharField()
    version = serializers.CharField()
    project_uuid = serializers.UUIDField(allow_null=True)
    environment = serializers.CharField(allow_null=True)
    deployed_in_environment = serializers.BooleanField(allow_null=True)
    policy = serializers.DictField()
    ranking_run = serializers.IntegerField(allow_null=True)
    ranked_at = serializers.DateTimeField(allow_null=True)
    upload = GateUploadSerializer(allow_null=True)
    failing = GateFindingSerializer(many=True)
    waived = GateFindingSerializer(many=True)
    unranked = serializers.IntegerField()
    waited_seconds = serializers.FloatField()
    previous_version = serializers.CharField(required=False, allow_null=True)
    new_counts = GateCountsSerializer(required=False, allow_null=True)
    provisional_pass = serializers.BooleanField(
        required=False, help_text="while pending: the verdict on what is ranked so far"
    )
    waiting_for = serializers.CharField(required=False)


GateResultSerializer._declared_fields["pass"] = serializers.BooleanField(
    help_text="the build may go ahead"
)
