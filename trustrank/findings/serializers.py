"""Explicit API shapes for findings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from trustrank.findings.choices import OPEN_STATES, VEX_RESPONSES, Justification, TriageState
from trustrank.findings.models import Finding
from trustrank.findings.records import BulkTriageJob, TriagePolicy
from trustrank.lib.numbers import INT_MAX, int_or_none


class FindingSerializer(serializers.ModelSerializer[Finding]):
    advisory = serializers.SerializerMethodField()
    component = serializers.SerializerMethodField()
    project = serializers.SerializerMethodField()
    project_version = serializers.SerializerMethodField()
    kev = serializers.SerializerMethodField()
    epss = serializers.SerializerMethodField()
    assignee = serializers.IntegerField(source="assignee_id", allow_null=True, read_only=True)
    assignee_name = serializers.SerializerMethodField()
    overdue = serializers.BooleanField(read_only=True)
    # Read from the finding's FindingDue (None until ranked or set by hand).
    due_date = serializers.DateField(read_only=True, allow_null=True)
    due_date_manual = serializers.BooleanField(read_only=True)
    # The finding's Jira issue, {key, url}, null when none (trustrank/jira).
    jira = serializers.SerializerMethodField()

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
            "cvss_vector",
            "severity_source",
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
            "assignee",
            "assignee_name",
            "due_date",
            "due_date_manual",
            "overdue",
            "version",
            "jira",
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

    def get_jira(self, obj: Finding) -> dict[str, str] | None:
        from trustrank.jira.serializers import jira_link_data

        return jira_link_data(obj)

    def get_assignee_name(self, obj: Finding) -> str | None:
        user = obj.assignee if obj.assignee_id is not None else None
        return None if user is None else user.get_username()

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


# DRF's own date-time representation (its time zone and `Z`), shared by the list's rows.
_DATETIME = serializers.DateTimeField()


def finding_list_data(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """FindingSerializer's output for a page of findings, written straight from the model
    instances: the same keys in the same order, the same values. DRF's field machinery
    (a to_representation per field, per row, through get_attribute) was ~40 % of the web
    CPU of a list page that is not kept; tests/findings/test_list_rows.py compares the two
    on findings of every kind with every field set and unset."""
    from trustrank.jira.serializers import jira_link_data
    from trustrank.ranking.serializers import rank_fields

    today = timezone.localdate()
    datetime_data = _DATETIME.to_representation
    out = []
    for f in findings:
        vuln_id = f.vuln_id
        if vuln_id:
            advisory_id = f.advisory_id or vuln_id
            advisory: dict[str, Any] | None = {
                "id": advisory_id,
                "aliases": [a for a in f.aliases if a != advisory_id],
                "summary": f.title,
            }
        else:
            advisory = None
        component = (
            None if not f.component_key and f.component_id is None else {
                "id": f.component_id,
                "purl": f.component_purl,
                "name": f.component_name,
                "version": f.component_version,
                "ecosystem": f.ecosystem,
                "package": f.package_name,
            }
        )
        project = f.project
        version = f.project_version
        assignee_id = f.assignee_id
        due = f.due_or_none
        due_date = None if due is None else due.due_date
        state = f.state
        cvss = f.cvss_score
        resolved_at = f.resolved_at
        data: dict[str, Any] = {
            "id": f.pk,
            "kind": f.kind,
            "category": f.category,
            "source": f.source,
            "fingerprint": f.fingerprint,
            "title": f.title,
            "environment": f.environment,
            "service": f.service_id,
            "certificate": f.certificate_id,
            "identity": f.identity_id,
            "spiffe_id": f.spiffe_id,
            "evidence": f.evidence,
            "vuln_id": vuln_id,
            "advisory": advisory,
            "aliases": [None if a is None else str(a) for a in f.aliases],
            "component": component,
            "project": None if project is None else {"id": f.project_id, "name": project.name},
            "project_version": None if version is None else {
                "id": f.project_version_id,
                "version": version.version,
                "uuid": str(version.uuid),
            },
            "severity": f.severity,
            "cvss_score": None if cvss is None else float(cvss),
            "cvss_vector": f.cvss_vector,
            "severity_source": f.severity_source,
            "kev": {"listed": f.in_kev, "date_added": f.kev_date_added},
            "epss": {"probability": f.epss, "percentile": f.epss_percentile},
            "baseline_priority": f.baseline_priority,
            "state": state,
            "justification": f.justification,
            "response": f.response,
            "detail": f.detail,
            "match_status": f.match_status,
            "match_reason": f.match_reason,
            "fixed_versions": f.fixed_versions,
            "first_seen": datetime_data(f.first_seen),
            "last_seen": datetime_data(f.last_seen),
            "resolved_at": None if resolved_at is None else datetime_data(resolved_at),
            "auto_resolved": f.auto_resolved,
            "assignee": assignee_id,
            "assignee_name": None if assignee_id is None or f.assignee is None
            else f.assignee.get_username(),
            "due_date": None if due_date is None else due_date.isoformat(),
            "due_date_manual": due is not None and due.manual,
            "overdue": due_date is not None and state in OPEN_STATES and due_date < today,
            "version": f.version,
            "jira": jira_link_data(f),
        }
        ranking = rank_fields(f)
        data["rank_environment"] = ranking.pop("environment")
        data["rank_service"] = ranking.pop("service")
        data.update(ranking)
        out.append(data)
    return out


class UserRefField(serializers.Field[Any, Any, Any, Any]):
    """A user id or a username (null clears)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, int | str):
            raise serializers.ValidationError("a user id or a username")
        if isinstance(data, int) and int_or_none(data, minimum=1) is None:
            raise serializers.ValidationError("a user id or a username")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class TriageChangeFields(serializers.Serializer[Any]):
    """What one triage change may set; absent fields are left as they are (except that a
    new state clears the justification, response and detail it is not given)."""

    state = serializers.ChoiceField(choices=TriageState.choices, required=False)
    justification = serializers.ChoiceField(
        choices=Justification.choices, required=False, allow_blank=True
    )
    response = serializers.ListField(
        child=serializers.ChoiceField(choices=VEX_RESPONSES), required=False
    )
    detail = serializers.CharField(required=False, allow_blank=True)
    assignee = UserRefField(required=False, allow_null=True)
    due_date = serializers.DateField(required=False, allow_null=True)
    reason = serializers.CharField()


class TriageSerializer(TriageChangeFields):
    # The version the caller read (GET's `version` / ETag): a newer one answers 409.
    version = serializers.IntegerField(required=False, min_value=1, max_value=INT_MAX)


def _id(value: Any) -> bool:
    """A JSON integer a bigint column holds (an id past it would make the database raise)."""
    return isinstance(value, int) and int_or_none(value, minimum=1) is not None


class BulkTriageSerializer(TriageChangeFields):
    """`ids` (finding ids, or {"id", "version"} objects) or `filter` (the findings list's
    filter names and values)."""

    ids = serializers.ListField(child=serializers.JSONField(), required=False,
                                allow_empty=False, max_length=1_000_000)
    filter = serializers.DictField(required=False)

    def validate_ids(self, value: list[Any]) -> list[Any]:
        for item in value:
            if isinstance(item, dict):
                pk, version = item.get("id"), item.get("version")
                if not _id(pk) or (
                    version is not None and (not _id(version) or version > INT_MAX)
                ):
                    raise serializers.ValidationError(
                        'each item is a finding id or {"id": <int>, "version": <int>}'
                    )
            elif not _id(item):
                raise serializers.ValidationError(
                    'each item is a finding id or {"id": <int>, "version": <int>}'
                )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("ids" in attrs) == ("filter" in attrs):
            raise serializers.ValidationError({"ids": "give either `ids` or `filter`"})
        return attrs


class BulkTriageJobSerializer(serializers.ModelSerializer[BulkTriageJob]):
    status_url = serializers.SerializerMethodField()
    selection = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by_label", read_only=True)
    # The name `requested_by` had before every job kind spelled it the same way.
    actor_label = serializers.CharField(source="requested_by_label", read_only=True)

    class Meta:
        model = BulkTriageJob
        fields = [
            "id", "status", "progress_done", "progress_total", "counts", "error", "changes",
            "reason", "selection", "requested_by", "actor_label", "created_at", "started_at",
            "finished_at", "status_url", "phase", "attempts",
        ]

    def get_status_url(self, obj: BulkTriageJob) -> str:
        return f"/api/v1/findings/bulk-triage/{obj.pk}"

    def get_selection(self, obj: BulkTriageJob) -> dict[str, Any]:
        if obj.ids is not None:
            return {"ids": len(obj.ids)}
        return {"filter": obj.filter}


class TriagePolicySerializer(serializers.ModelSerializer[TriagePolicy]):
    team = serializers.IntegerField(source="team_id", read_only=True)

    class Meta:
        model = TriagePolicy
        fields = [
            "team", "immediate_days", "out_of_cycle_days", "scheduled_days", "defer_days",
        ]
        extra_kwargs = {
            name: {"required": False, "allow_null": True, "min_value": 0, "max_value": 3650}
            for name in ("immediate_days", "out_of_cycle_days", "scheduled_days", "defer_days")
        }


class CommentSerializer(serializers.Serializer[Any]):
    body = serializers.CharField()
