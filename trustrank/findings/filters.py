"""One FilterSet for findings, shared by the list page, the API, bulk triage and exports.

Every filter is a form field: the page renders the FilterSet's form, the API answers an
invalid value with 400 naming the field (DRF's DjangoFilterBackend raises on an invalid form),
and a bulk triage job stores the same parameters and evaluates them again in the worker.

Open findings are the default: without `open` or `state`, only open findings match;
`open=all` (or an explicit empty `open=`) shows every state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import django_filters
import django_filters.fields
from django import forms
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.findings.choices import OPEN_STATES, FindingKind, MatchStatus, Severity, TriageState
from trustrank.findings.models import Finding
from trustrank.findings.search import (
    is_purl_search,
    purl_condition,
    search_value,
    substring_condition,
)
from trustrank.lib.filters import RefFilter, ref_condition
from trustrank.lib.numbers import int_or_none
from trustrank.vulns.engine.ecosystems import normalize_name

DECISIONS = [
    ("immediate", "Immediate"),
    ("out-of-cycle", "Out-of-cycle"),
    ("scheduled", "Scheduled"),
    ("defer", "Defer"),
]

ORDERINGS = [
    ("rank", "Contextual rank"),
    ("-rank", "Contextual rank, last first"),
    ("baseline", "Baseline priority"),
    ("due", "Due date, soonest first"),
]
# The findings list's order when none is asked for: the latest ranking run's, the unranked
# after the ranked by baseline priority (rank_rows.RankOrderedRows).
DEFAULT_ORDERING = "rank"

OPEN_CHOICES = [("true", "Open"), ("false", "Closed"), ("all", "All states")]
_OPEN_ALIASES = {"1": "true", "True": "true", "yes": "true", "0": "false", "False": "false",
                 "no": "false"}

# Trigrams need three characters: a shorter search could not use the index, so it matches
# prefixes of ids and names through their btree indexes instead.
SEARCH_MIN_SUBSTRING = 3


def findings_ordered(qs: QuerySet[Finding], value: str) -> QuerySet[Finding]:
    """`qs` in one of the list's orders (ORDERINGS); "baseline" keeps the queryset's.

    The rank orders are one team's queue order, its key (qkey, then the finding id), which
    is the order of its ranks: the stored `rank` column is the rank as of the run that last
    wrote the row. Across several teams the key does not give the rank: the pages read those
    lists through rank_rows.RankOrderedRows, which merges the teams' orders by counted rank."""
    if value == "rank":
        return qs.order_by(F("ranked__qkey").asc(nulls_last=True), "ranked__finding_id",
                           "-baseline_priority", "-id")
    if value == "-rank":
        return qs.order_by(F("ranked__qkey").desc(nulls_first=True),
                           F("ranked__finding_id").desc(), "id")
    if value == "due":
        return qs.order_by(F("due__due_date").asc(nulls_last=True), "-baseline_priority", "-id")
    return qs


def search_spellings(value: str) -> set[str]:
    """The lower-cased spellings a (stripped) search value matches."""
    spellings = {value.lower()}
    if not any(c in value for c in ":/@"):
        # A bare package name may be written as PyPI normalises it (a purl or an id is
        # not a package name: its normalised spelling would only cost a second scan).
        spellings.add(normalize_name("PyPI", value).lower())
    return spellings


def search_alone_spellings(params: Any) -> list[str] | None:
    """The search value's spellings when these query parameters filter the list by nothing
    else (open findings, the default, may be asked explicitly) and it is a substring or
    purl search, not a prefix one (too short): the lists trustrank/findings/
    search_groups.py answers. None otherwise."""
    value = search_value(params)
    lowered = value.lower()
    if len(lowered) < SEARCH_MIN_SUBSTRING:
        return None
    for name in FindingFilterSet.base_filters:
        if name in ("q", "ordering"):
            continue
        values = params.getlist(name) if hasattr(params, "getlist") else [params.get(name)]
        given = [v for v in values if v not in (None, "")]
        if given and not (name == "open" and given == ["true"]):
            return None
    # A purl search has one spelling (`filter_q`).
    return [lowered] if is_purl_search(lowered) else sorted(search_spellings(value))


class OpenField(django_filters.fields.ChoiceField):
    """true (open, the default), false (closed) or all; 1/0 and True/False are accepted as
    the BooleanFilter that came before took them."""

    def to_python(self, value: Any) -> str:
        value = super().to_python(value)
        return _OPEN_ALIASES.get(value, value)


class OpenFilter(django_filters.ChoiceFilter):
    field_class = OpenField


_TRUE = {"true", "1", "yes", "on", "2"}
_FALSE = {"false", "0", "no", "off", "3"}


class StrictNullBooleanField(forms.NullBooleanField):
    """true/false (and 1/0, yes/no); empty means any. Anything else is an error naming the
    field, where Django's NullBooleanField would quietly read it as 'any'."""

    # A plain select: NullBooleanSelect would read an unknown value as 'any' before the
    # field sees it.
    widget = forms.Select(choices=[("", "Any"), ("true", "Yes"), ("false", "No")])

    def prepare_value(self, value: Any) -> Any:
        if value is True:
            return "true"
        if value is False:
            return "false"
        return value

    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]
        if value in (None, "") or (isinstance(value, str) and value.lower() == "unknown"):
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise forms.ValidationError("must be true or false")

    def validate(self, value: Any) -> None:
        return None


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictNullBooleanField


class AssigneeField(forms.CharField):
    """A user id, `me`, or `none` (unassigned)."""

    def clean(self, value: Any) -> Any:
        value = super().clean(value)
        if value in (None, ""):
            return value
        value = str(value).strip()
        if value.lower() in ("me", "none"):
            return value.lower()
        if int_or_none(value, minimum=1) is None:
            raise forms.ValidationError("must be a user id, 'me' or 'none'")
        return value


class AssigneeFilter(django_filters.Filter):
    field_class = AssigneeField


def _request_user_id(request: Any) -> int | None:
    """The user `assignee=me` means: the signed-in user, or the person who created the key."""
    if request is None:
        return None
    auth = getattr(request, "auth", None)
    if auth is not None and hasattr(auth, "created_by_id"):
        return auth.created_by_id  # type: ignore[no-any-return]
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return int(user.pk)
    return None


def team_refs_within(value: str, team_ids: Iterable[int]) -> bool:
    """Whether the team `value` names (id or name) is one of `team_ids`."""
    return Team.objects.filter(ref_condition(value), pk__in=list(team_ids)).exists()


class FindingFilterSet(django_filters.FilterSet):
    """The findings list's filters, for the page and the API alike.

    distinct=False on the multiple-choice filters: none of them joins a to-many relation, and
    SELECT DISTINCT would make PostgreSQL read and sort every match before the first page.
    """

    q = django_filters.CharFilter(method="filter_q", label="Search")
    open = OpenFilter(
        method="filter_open", choices=OPEN_CHOICES, empty_label=None, label="Show"
    )
    kind = django_filters.MultipleChoiceFilter(choices=FindingKind.choices, distinct=False)
    # Ids, or names (and a project version's uuid) as Dependency-Track clients send them.
    project = RefFilter(field_name="project", label="Project")
    team = RefFilter(field_name="team", label="Team")
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices, distinct=False)
    state = django_filters.MultipleChoiceFilter(choices=TriageState.choices, distinct=False)
    kev = StrictBooleanFilter(field_name="in_kev", label="KEV")
    assignee = AssigneeFilter(method="filter_assignee", label="Assignee")
    overdue = StrictBooleanFilter(method="filter_overdue", label="Overdue")
    category = django_filters.CharFilter()
    environment = django_filters.CharFilter()
    service = RefFilter(field_name="service", label="Service")
    project_version = RefFilter(field_name="project_version", name_field=None,
                                uuid_field="uuid", label="Project version")
    match_status = django_filters.MultipleChoiceFilter(
        choices=MatchStatus.choices, distinct=False
    )
    epss_min = django_filters.NumberFilter(
        field_name="epss", lookup_expr="gte", min_value=0, max_value=1, label="EPSS from"
    )
    epss_max = django_filters.NumberFilter(
        field_name="epss", lookup_expr="lte", min_value=0, max_value=1, label="EPSS to"
    )
    decision = django_filters.MultipleChoiceFilter(
        field_name="ranked__decision", choices=DECISIONS, distinct=False
    )
    due_before = django_filters.DateFilter(
        field_name="due__due_date", lookup_expr="lt", label="Due before"
    )
    # No value means DEFAULT_ORDERING (the contextual rank) on the page and in the API; the
    # queryset itself keeps the baseline order, which bulk triage and exports do not read.
    ordering = django_filters.ChoiceFilter(
        method="filter_ordering",
        choices=ORDERINGS,
        empty_label=None,
        label="Order",
    )

    class Meta:
        model = Finding
        fields: list[str] = []

    _form_class: Any = None

    def __init__(self, data: Any = None, *args: Any, user_id: int | None = None,
                 team_ids: Iterable[int] | None = None, **kwargs: Any) -> None:
        super().__init__(data, *args, **kwargs)
        # `assignee=me` needs to know who asks: the request's user, or (in a bulk triage job,
        # which has no request) the id the submitting request resolved.
        self.user_id = user_id if user_id is not None else _request_user_id(self.request)
        # The teams `team` may name: the caller's (a team of someone else's is refused, not
        # read as an empty list). None: the queryset alone limits it (a queued job).
        if team_ids is None and self.request is not None:
            from trustrank.accounts.principal import principal_for_request

            team_ids = principal_for_request(self.request).team_ids
        self.team_ids = None if team_ids is None else {int(t) for t in team_ids}

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if valid and self.team_ids is not None:
            team = self.form.cleaned_data.get("team")
            if team and not team_refs_within(team, self.team_ids):
                self.form.add_error("team", f"you are not a member of team {team}")
                return False
        return valid

    def get_form_class(self) -> Any:
        """django-filter builds the form class anew for every request (a field per filter,
        ~3 ms); the filters are the class's, so one form class serves them all. A view that
        changes a form's fields changes that form's own copies."""
        cls = type(self)
        if cls.__dict__.get("_form_class") is None:
            cls._form_class = super().get_form_class()
        return cls._form_class

    @classmethod
    def unknown_params(cls, names: Iterable[str]) -> list[str]:
        """The names that are not filters of the findings list."""
        return [n for n in names if n not in cls.base_filters]

    # --- the default: open findings unless the caller chose states ---

    def _given(self, name: str) -> bool:
        data = self.data or {}
        if hasattr(data, "getlist"):
            return any(v not in (None, "") for v in data.getlist(name))
        value = data.get(name)
        if isinstance(value, list | tuple):
            return any(v not in (None, "") for v in value)
        return value not in (None, "")

    def _open_by_default(self) -> bool:
        # No `open` at all and no `state`: open findings. An explicit empty `open=` asks for
        # every state, as the project page and the groups have it.
        data = self.data or {}
        return "open" not in data and not self._given("state")

    def filter_queryset(self, queryset: QuerySet[Finding]) -> QuerySet[Finding]:
        qs = super().filter_queryset(queryset)
        if self._open_by_default():
            qs = qs.filter(state__in=OPEN_STATES)
        return qs

    def is_filtered(self) -> bool:
        """Whether the caller narrowed the list beyond the default (open findings)."""
        return any(self._given(name) for name in self.filters if name != "ordering")

    # --- filter methods ---

    def filter_ordering(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        return findings_ordered(qs, value)

    def ordering_value(self) -> str:
        """The order asked for, DEFAULT_ORDERING when none (or an invalid one) was."""
        if not self.is_valid():
            return DEFAULT_ORDERING
        return self.form.cleaned_data.get("ordering") or DEFAULT_ORDERING

    def filter_open(self, qs: QuerySet[Finding], name: str, value: Any) -> QuerySet[Finding]:
        if value == "true":
            return qs.filter(state__in=OPEN_STATES)
        if value == "false":
            return qs.exclude(state__in=OPEN_STATES)
        return qs

    def filter_assignee(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        if not value:
            return qs
        if value == "none":
            return qs.filter(assignee__isnull=True)
        if value == "me":
            if self.user_id is None:
                return qs.none()
            return qs.filter(assignee_id=self.user_id)
        return qs.filter(assignee_id=int(value))

    def filter_overdue(self, qs: QuerySet[Finding], name: str, value: Any) -> QuerySet[Finding]:
        if value is None:
            return qs
        overdue = Q(state__in=OPEN_STATES, due__due_date__lt=timezone.localdate())
        return qs.filter(overdue) if value else qs.exclude(overdue)

    def filter_q(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        value = (value or "").strip()
        if not value:
            return qs
        lowered = value.lower()
        if is_purl_search(lowered):
            # `pkg:` only ever starts a purl: a btree range that carries the sort key.
            return purl_condition(qs, lowered)
        spellings = search_spellings(value)
        if len(lowered) < SEARCH_MIN_SUBSTRING:
            cond = Q()
            for s in spellings:
                cond |= Q(package_name__startswith=s) | Q(component_name__startswith=s)
            return qs.filter(cond)
        # The generated, lower-cased search text: the trigram GIN index (findings_search_trgm)
        # answers substrings and prefixes of ids, aliases, package and component names and
        # purls alike (trustrank/findings/search.py).
        return substring_condition(qs, sorted(spellings))

    def alone_spellings(self) -> list[str] | None:
        """`search_alone_spellings` of a valid filter's values."""
        return search_alone_spellings(self.data) if self.is_valid() else None

    def searches(self) -> bool:
        """Whether a valid search value was given: its page then pages through its sorted
        matches (paging.SortedMatches)."""
        return self.is_valid() and bool(search_value(self.data))

    # --- for the page ---

    def cleaned_params(self) -> dict[str, Any]:
        """The valid, non-empty filter values as JSON (lists for multiple choices): what a
        bulk triage job stores to evaluate the same selection again."""
        out: dict[str, Any] = {}
        if not self.is_valid():
            return out
        for name in self.filters:
            if name == "ordering" or not self._given(name):
                continue
            data = self.data
            if hasattr(data, "getlist"):
                values = [v for v in data.getlist(name) if v not in (None, "")]
            else:
                raw = data.get(name)
                values = list(raw) if isinstance(raw, list | tuple) else [raw]
            if isinstance(self.filters[name], django_filters.MultipleChoiceFilter):
                out[name] = [str(v) for v in values]
            elif name == "assignee" and str(values[0]).lower() == "me":
                out[name] = str(self.user_id) if self.user_id is not None else "0"
            else:
                out[name] = str(values[-1])
        return out
