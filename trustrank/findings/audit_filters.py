"""AuditEventFilterSet: the audit log's filters, shared by the page (/audit/) and the API
(GET /api/v1/audit-events). A value that cannot mean anything is refused, naming the field."""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from trustrank.findings.choices import FindingKind
from trustrank.findings.records import AuditEvent
from trustrank.lib.numbers import IdFilter, int_or_none

# Actions the application writes today; the filter accepts any well-formed action name (new
# kinds of event appear as features add them), the page offers these.
KNOWN_ACTIONS = (
    "created",
    "state_changed",
    "commented",
    "auto_resolved",
    "reopened",
    "assigned",
    "due_date_changed",
    "mapping_set",
    "policy_created",
    "feed_imported",
    "jira_issue_created",
    "vex_imported",
)

_ACTION = re.compile(r"^[a-z0-9_.:-]{1,40}$")
_ACTOR_REF = re.compile(r"^(user|key):(.*)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ActorField(forms.Field):
    """`user:<id>`, `key:<id>`, or any other text: a substring of the actor's label."""

    def to_python(self, value: Any) -> tuple[str, Any] | None:
        text = str(value or "").strip()
        if not text:
            return None
        m = _ACTOR_REF.match(text)
        if m is None:
            return ("label", text)
        ref = int_or_none(m.group(2), minimum=1)
        if ref is None:
            raise ValidationError(
                f"'{text}': give user:<id>, key:<id> or part of the actor's name", code="invalid"
            )
        return (m.group(1), ref)


class ActionsField(forms.Field):
    """One or more action names: repeated (`action=a&action=b`) or comma-separated."""

    widget = forms.SelectMultiple

    def to_python(self, value: Any) -> list[str]:
        if not value:
            return []
        items = [value] if isinstance(value, str) else list(value)
        names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
        bad = [n for n in names if not _ACTION.match(n)]
        if bad:
            raise ValidationError(f"not an action name: {', '.join(bad)}", code="invalid")
        return names


class MomentField(forms.Field):
    """An ISO 8601 date (2026-12-01) or date and time (2026-12-01T10:00:00Z); a time without a
    zone is UTC. Returns (datetime, was_a_date)."""

    def to_python(self, value: Any) -> tuple[datetime, bool] | None:
        text = str(value or "").strip()
        if not text:
            return None
        try:
            # A bare date first: parse_datetime would read it as midnight.
            day = parse_date(text) if _DATE.match(text) else None
            at = None if day is not None else parse_datetime(text)
        except ValueError as exc:
            raise ValidationError(f"'{text}' is not a valid date or time", code="invalid") from exc
        if at is not None:
            if timezone.is_naive(at):
                at = timezone.make_aware(at, timezone.get_fixed_timezone(0))
            return (at, False)
        if day is None:
            raise ValidationError(
                f"'{text}' is not an ISO date (YYYY-MM-DD) or date and time", code="invalid"
            )
        start = datetime.combine(day, time.min, tzinfo=timezone.get_fixed_timezone(0))
        return (start, True)


@extend_schema_field(OpenApiTypes.STR)
class ActorFilter(django_filters.Filter):
    field_class = ActorField


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class ActionsFilter(django_filters.Filter):
    field_class = ActionsField


@extend_schema_field(OpenApiTypes.STR)
class MomentFilter(django_filters.Filter):
    field_class = MomentField


class AuditEventFilterSet(django_filters.FilterSet):
    """Who (actor), what (action, finding_kind), about what (project, finding, team), when
    (since, until: a date means the whole day)."""

    actor = ActorFilter(method="filter_actor", label="Actor")
    action = ActionsFilter(method="filter_action", label="Kind of event")
    finding_kind = django_filters.MultipleChoiceFilter(
        field_name="finding__kind", choices=FindingKind.choices, label="Finding kind"
    )
    project = IdFilter(field_name="finding__project_id", label="Project")
    finding = IdFilter(field_name="finding_id", label="Finding")
    team = IdFilter(field_name="team_id", label="Team")
    since = MomentFilter(method="filter_since", label="Since")
    until = MomentFilter(method="filter_until", label="Until")

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_actor(self, qs: QuerySet[AuditEvent], name: str, value: Any) -> QuerySet[AuditEvent]:
        if not value:
            return qs
        kind, ref = value
        if kind == "user":
            return qs.filter(actor_user_id=ref)
        if kind == "key":
            return qs.filter(actor_key_id=ref)
        return qs.filter(actor_label__icontains=ref)

    def filter_action(
        self, qs: QuerySet[AuditEvent], name: str, value: list[str]
    ) -> QuerySet[AuditEvent]:
        return qs.filter(action__in=value) if value else qs

    def filter_since(self, qs: QuerySet[AuditEvent], name: str, value: Any) -> QuerySet[AuditEvent]:
        return qs.filter(created_at__gte=value[0]) if value else qs

    def filter_until(self, qs: QuerySet[AuditEvent], name: str, value: Any) -> QuerySet[AuditEvent]:
        if not value:
            return qs
        at, whole_day = value
        # "until 2026-12-01" includes that day.
        return qs.filter(created_at__lt=at + timedelta(days=1)) if whole_day else qs.filter(
            created_at__lte=at
        )
