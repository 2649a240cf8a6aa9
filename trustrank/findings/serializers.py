"""Explicit API shapes for findings."""

from __future__ import annotations

from typing import Any

from django.db.models import F, QuerySet
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


def page_rows_for_ids(qs: QuerySet[Finding], ids: list[int]) -> list[Finding]:
    """The findings `ids` (those `qs` still matches) in that order, with their counted ranks
    (counted for the page at once): the rows of one page of the findings list."""
    if not ids:
        return []
    from trustrank.ranking.selectors import ranks_attach

    found = {f.pk: f for f in qs.order_by().filter(pk__in=ids)}
    rows = [found[pk] for pk in ids if pk in found]
    ranks_attach(rows)
    return rows


# DRF's own date-time representation (its time zone and `Z`), shared by the list's rows.
_DATETIME = serializers.DateTimeField()

# The columns a list row is written from (finding_rows_for_ids), as values_list names.
_ROW_COLUMNS = (
    "id", "kind", "category", "source", "fingerprint", "title", "environment", "service_id",
    "certificate_id", "identity_id", "spiffe_id", "evidence", "vuln_id", "advisory_id",
    "aliases", "component_id", "component_key", "component_purl", "component_name",
    "component_version", "ecosystem", "package_name", "project_id", "project__name",
    "project_version_id", "project_version__version", "project_version__uuid", "severity",
    "cvss_score", "cvss_vector", "severity_source", "in_kev", "kev_date_added", "epss",
    "epss_percentile", "baseline_priority", "state", "justification", "response", "detail",
    "match_status", "match_reason", "fixed_versions", "first_seen", "last_seen",
    "resolved_at", "auto_resolved", "assignee_id", "assignee_name", "due__due_date",
    "due__manual", "version", "ranked__rank", "ranked__env_rank", "ranked__score",
    "ranked__decision", "ranked__context__data", "team_id",
)


def finding_rows_for_ids(qs: QuerySet[Finding], ids: list[int]) -> list[dict[str, Any]]:
    """FindingSerializer's output for the findings `ids` (those `qs` still matches), in that
    order: the same keys in the same order, the same values, read as one row of columns per
    finding plus one query for the Jira links. Built as model instances (eight per finding
    with their relations) and serialized field by field by DRF, a page of 50 that is not
    kept cost ~35 ms of web CPU; tests/findings/test_list_rows.py compares the two on
    findings of every kind with every field set and unset."""
    if not ids:
        return []
    from django.contrib.auth import get_user_model

    from trustrank.jira.models import JiraIssueLink
    from trustrank.ranking.ranks import ranks_of
    from trustrank.ranking.serializers import context_fields

    username = get_user_model().USERNAME_FIELD
    found = {
        row[0]: row
        for row in qs.order_by().prefetch_related(None).filter(pk__in=ids)
        .annotate(assignee_name=F(f"assignee__{username}"))
        .values_list(*_ROW_COLUMNS)
    }
    # A finding's Jira issue: its first link (trustrank.jira.serializers.jira_link_data).
    jira: dict[int, tuple[Any, ...]] = {}
    for finding_id, created_at, pk, key, url in JiraIssueLink.objects.filter(
        finding_id__in=list(found)
    ).values_list("finding_id", "created_at", "pk", "key", "url"):
        if finding_id not in jira or (created_at, pk) < jira[finding_id][:2]:
            jira[finding_id] = (created_at, pk, key, url)
    # The stored ranks are those of the run that last wrote each row: counted for the page.
    counted = ranks_of(found, teams={row[-1] for row in found.values()})
    today = timezone.localdate()
    datetime_data = _DATETIME.to_representation
    out = []
    for pk in ids:
        row = found.get(pk)
        if row is None:
            continue
        (
            _, kind, category, source, fingerprint, title, environment, service_id,
            certificate_id, identity_id, spiffe_id, evidence, vuln_id, advisory_id, aliases,
            component_id, component_key, component_purl, component_name, component_version,
            ecosystem, package_name, project_id, project_name, project_version_id,
            project_version, project_version_uuid, severity, cvss_score, cvss_vector,
            severity_source, in_kev, kev_date_added, epss, epss_percentile, baseline_priority,
            state, justification, response, detail, match_status, match_reason,
            fixed_versions, first_seen, last_seen, resolved_at, auto_resolved, assignee_id,
            assignee_name, due_date, due_manual, version, rank, env_rank, score, decision,
            context, _team,
        ) = row
        if rank is not None:
            rank, env_rank = counted.get(pk, (rank, env_rank))
        if vuln_id:
            shown_id = advisory_id or vuln_id
            advisory: dict[str, Any] | None = {
                "id": shown_id,
                "aliases": [a for a in aliases if a != shown_id],
                "summary": title,
            }
        else:
            advisory = None
        link = jira.get(pk)
        # Unranked: no rank row (rank is never null in one), so no context either.
        ctx: dict[str, Any] = (context or {}) if rank is not None else {}
        data: dict[str, Any] = {
            "id": pk,
            "kind": kind,
            "category": category,
            "source": source,
            "fingerprint": fingerprint,
            "title": title,
            "environment": environment,
            "service": service_id,
            "certificate": certificate_id,
            "identity": identity_id,
            "spiffe_id": spiffe_id,
            "evidence": evidence,
            "vuln_id": vuln_id,
            "advisory": advisory,
            "aliases": [None if a is None else str(a) for a in aliases],
            "component": None if not component_key and component_id is None else {
                "id": component_id,
                "purl": component_purl,
                "name": component_name,
                "version": component_version,
                "ecosystem": ecosystem,
                "package": package_name,
            },
            "project": None if project_id is None else {"id": project_id, "name": project_name},
            "project_version": None if project_version_id is None else {
                "id": project_version_id,
                "version": project_version,
                "uuid": str(project_version_uuid),
            },
            "severity": severity,
            "cvss_score": None if cvss_score is None else float(cvss_score),
            "cvss_vector": cvss_vector,
            "severity_source": severity_source,
            "kev": {"listed": in_kev, "date_added": kev_date_added},
            "epss": {"probability": epss, "percentile": epss_percentile},
            "baseline_priority": baseline_priority,
            "state": state,
            "justification": justification,
            "response": response,
            "detail": detail,
            "match_status": match_status,
            "match_reason": match_reason,
            "fixed_versions": fixed_versions,
            "first_seen": datetime_data(first_seen),
            "last_seen": datetime_data(last_seen),
            "resolved_at": None if resolved_at is None else datetime_data(resolved_at),
            "auto_resolved": auto_resolved,
            "assignee": assignee_id,
            "assignee_name": None if assignee_id is None else assignee_name,
            "due_date": None if due_date is None else due_date.isoformat(),
            # A due row has `manual` (never null): without one there is no due date.
            "due_date_manual": bool(due_manual),
            "overdue": due_date is not None and state in OPEN_STATES and due_date < today,
            "version": version,
            "jira": None if link is None else {"key": link[2], "url": link[3]},
            # trustrank.ranking.serializers.rank_fields, in its order.
            "rank_environment": ctx.get("environment") or None,
            "rank_service": ctx.get("service") or None,
            "rank": rank,
            "environment_rank": env_rank,
            "score": score,
            "decision": decision or None,
            "baseline": baseline_priority,
            **context_fields(ctx),
        }
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
