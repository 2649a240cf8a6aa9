"""The one Finding model for every kind of problem TrustRank reports, its comments, and the one
append-only AuditEvent table.

Shape: one wide table, not a base table with 1:1 detail tables. The findings list, the
priorities queue and the exports filter and order every kind in one index walk (team, state,
priority); a 1:1 detail table would put a join on every page of a list that must stay fast at
a million rows. Columns that lists filter, sort or join on are real columns — the
vulnerability ones are blank for other kinds, which costs PostgreSQL next to nothing. Evidence
that is only shown, never queried, lives in `evidence`, a JSON object whose shape per kind and
category is documented (and typed) in `trustrank/findings/evidence.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.db.models import Case, F, Func, Q, Value, When
from django.db.models.functions import Coalesce, Least, Lower
from django.utils import timezone

from trustrank.findings.choices import (
    CATEGORY_LABELS,
    OPEN_STATES,
    PRIORITY_CVSS_WEIGHT,
    PRIORITY_EPSS_WEIGHT,
    PRIORITY_KEV_BONUS,
    UNKNOWN_SCORE,
    FindingKind,
    FindingSource,
    Justification,
    MatchStatus,
    Severity,
    SeveritySource,
    TriageState,
    title_line,
)
from trustrank.findings.ranked import RankedFindingFields


def baseline_priority_expression() -> Any:
    # Rounded to two decimals in the database: 9.8 · 6 is 58.800000000000004 in floating point,
    # and the API and exports must show what the page shows.
    from django.db.models.functions import Round

    return Round(
        Least(
            Value(100.0),
            F("severity_score") * Value(PRIORITY_CVSS_WEIGHT)
            + Coalesce(F("epss"), Value(0.0)) * Value(PRIORITY_EPSS_WEIGHT)
            + Case(When(in_kev=True, then=Value(PRIORITY_KEV_BONUS)), default=Value(0.0)),
        ),
        precision=2,
    )


class AliasesText(Func):
    """`findings_aliases_text(aliases)`: the aliases joined by spaces. PostgreSQL marks
    array_to_string STABLE, which a generated column refuses; migration 0007 declares this
    wrapper IMMUTABLE (true for a varchar array)."""

    function = "findings_aliases_text"
    output_field = models.TextField()


class ComponentSearchGroup(Func):
    """`findings_search_group(package_name, component_name, component_purl)`: the hash of
    the component half of the search text, the id of its `SearchGroup` (part 0); declared
    IMMUTABLE by migration 0016."""

    function = "findings_search_group"
    output_field = models.BigIntegerField()


def search_text_expression() -> Any:
    """Lower-cased ids, aliases, package and component names and the purl, space-separated:
    what the list's search matches substrings of, through a trigram GIN index."""
    parts = [
        F("vuln_id"),
        F("cve_id"),
        AliasesText(F("aliases")),
        F("package_name"),
        F("component_name"),
        F("component_purl"),
    ]
    return Lower(
        Func(*parts, template="(%(expressions)s)", arg_joiner=" || ' ' || ",
             output_field=models.TextField())
    )


class Finding(RankedFindingFields, models.Model):
    """One problem a team should look at, of any kind, identified by `fingerprint` (unique per
    team): for a vulnerability the (project version, component, advisory group) triple, for an
    identity problem (environment, category, certificate or SPIFFE ID or call edge), for a
    reliability problem (environment, category, the services involved).

    Lifecycle (every kind): created `in_triage`; people move it through the VEX states with a
    reason; the evidence disappearing resolves it (`auto_resolved`), the evidence returning
    reopens an auto-resolved one. Every step is an AuditEvent.
    """

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=24, choices=FindingKind.choices)
    # What sort of problem within the kind: an identity finding's "expired", "weak_key"…, a
    # reliability finding's "broken_context"; blank for vulnerabilities.
    category = models.CharField(max_length=40, blank=True)
    source = models.CharField(max_length=16, choices=FindingSource.choices)
    fingerprint = models.CharField(max_length=64)
    title = models.TextField(blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.UNKNOWN)
    # CVSS, or a stand-in from the severity label when no vector is known (unknown = 5.0).
    severity_score = models.FloatField(default=UNKNOWN_SCORE)
    state = models.CharField(
        max_length=24, choices=TriageState.choices, default=TriageState.IN_TRIAGE
    )
    justification = models.CharField(max_length=40, choices=Justification.choices, blank=True)
    response = models.JSONField(default=list, blank=True)
    detail = models.TextField(blank=True)
    # Kind-specific evidence that is shown, never filtered on: see findings/evidence.py.
    evidence = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    auto_resolved = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Every write sets it (raw SQL updates too): incremental ranking runs read what changed.
    updated_at = models.DateTimeField(auto_now=True)
    # Database defaults too: bulk COPY and raw INSERTs that predate these columns keep working.
    # Optimistic concurrency: every change to triage, owner or due date adds one, and a change
    # made against an older version is refused (API: If-Match / `version`, 412 / 409).
    version = models.PositiveIntegerField(default=1, db_default=1)
    # --- who owns it and by when (issue: triage at team scale) ---
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The due date lives in FindingDue (`due`, below): a ranking run sets a million of them
    # on a team's first run, which this table's indexes made minutes of work.

    # --- what the finding is about (every reference optional) ---
    # Environments are names: identity evidence names environments that traces never saw.
    environment = models.CharField(max_length=120, blank=True)
    service = models.ForeignKey(
        "runtime.Service", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    project = models.ForeignKey(
        "inventory.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    project_version = models.ForeignKey(
        "inventory.ProjectVersion",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    component = models.ForeignKey(
        "inventory.Component", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    certificate = models.ForeignKey(
        "identity.Certificate",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="findings",
    )
    identity = models.ForeignKey(
        "identity.Identity", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    spiffe_id = models.CharField(max_length=2048, blank=True)

    # --- vulnerability columns (blank for other kinds): what lists filter and join on ---
    component_key = models.CharField(max_length=2048, blank=True)
    component_purl = models.CharField(max_length=2048, blank=True)
    component_name = models.CharField(max_length=512, blank=True)
    component_version = models.CharField(max_length=255, blank=True)
    ecosystem = models.CharField(max_length=64, blank=True)
    package_name = models.CharField(max_length=512, blank=True)
    advisory = models.ForeignKey(
        "vulns.Advisory", null=True, blank=True, on_delete=models.SET_NULL, related_name="findings"
    )
    vuln_id = models.CharField(max_length=128, blank=True)
    aliases = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    cve_id = models.CharField(max_length=32, blank=True)
    match_status = models.CharField(max_length=16, choices=MatchStatus.choices, blank=True)
    match_reason = models.TextField(blank=True)
    fixed_versions = models.JSONField(default=list, blank=True)
    cvss_score = models.FloatField(null=True, blank=True)
    # The CVSS vector behind cvss_score, and where the severity came from: the advisory,
    # the SBOM, NVD (the advisory has no CVSS; trustrank.vulns.services.nvd) or a label.
    # Database defaults: bulk COPY and raw INSERTs that predate these columns keep working.
    cvss_vector = models.CharField(max_length=255, blank=True, default="", db_default="")
    severity_source = models.CharField(
        max_length=16, choices=SeveritySource.choices, blank=True, default="", db_default=""
    )
    in_kev = models.BooleanField(default=False)
    kev_date_added = models.DateField(null=True, blank=True)
    epss = models.FloatField(null=True, blank=True)
    epss_percentile = models.FloatField(null=True, blank=True)
    # What the SBOM said: its vulnerability entry and VEX analysis, kept as evidence.
    vex_evidence = models.JSONField(default=dict, blank=True)

    baseline_priority = models.GeneratedField(
        expression=baseline_priority_expression(),
        output_field=models.FloatField(),
        db_persist=True,
    )
    # What the search box matches substrings of (see search_text_expression).
    search_text = models.GeneratedField(
        expression=search_text_expression(),
        output_field=models.TextField(),
        db_persist=True,
    )
    # Its component's search group, stored: a ranking run reads it with every open finding
    # for the ranked row (computed per row, it was most of PostgreSQL's time in the gather:
    # 6.5 s of 8.7 at a million findings).
    search_group = models.GeneratedField(
        expression=ComponentSearchGroup(F("package_name"), F("component_name"),
                                        F("component_purl")),
        output_field=models.BigIntegerField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["-baseline_priority", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "fingerprint"], name="finding_team_fp"),
        ]
        indexes = [
            # The list's default order, per team: keyset pages walk this index.
            models.Index(
                F("team"), F("baseline_priority").desc(), F("id").desc(), name="findings_team_prio"
            ),
            models.Index(
                F("team"),
                F("state"),
                F("baseline_priority").desc(),
                F("id").desc(),
                name="findings_team_state_prio",
            ),
            models.Index(
                F("team"),
                F("kind"),
                F("baseline_priority").desc(),
                F("id").desc(),
                name="findings_team_kind_prio",
            ),
            models.Index(
                F("team"),
                F("severity"),
                F("baseline_priority").desc(),
                F("id").desc(),
                name="findings_team_sev_prio",
            ),
            # KEV findings are few: a partial index keeps "KEV only" lists and counts small.
            models.Index(
                F("team"),
                F("baseline_priority").desc(),
                F("id").desc(),
                condition=Q(in_kev=True),
                name="findings_team_kev_prio",
            ),
            # What changed since a time: incremental ranking runs read only these.
            models.Index(fields=["team", "updated_at"], name="findings_team_updated"),
            models.Index(fields=["team", "assignee"], name="findings_team_assignee"),
            models.Index(fields=["project_version", "state"], name="findings_pv_state"),
            models.Index(fields=["project", "state"], name="findings_project_state"),
            models.Index(fields=["team", "environment", "kind"], name="findings_team_env_kind"),
            models.Index(fields=["service"], name="findings_service"),
            models.Index(fields=["cve_id"], name="findings_cve"),
            models.Index(fields=["ecosystem", "package_name"], name="findings_package"),
            GinIndex(fields=["aliases"], name="findings_aliases_gin"),
            # Substring and prefix search over ids, packages and purls (pg_trgm).
            GinIndex(
                fields=["search_text"], opclasses=["gin_trgm_ops"], name="findings_search_trgm"
            ),
            # Package search is a prefix match on the normalised and the component name.
            models.Index(
                fields=["package_name"],
                opclasses=["varchar_pattern_ops"],
                name="findings_package_prefix",
            ),
            models.Index(
                fields=["component_name"],
                opclasses=["varchar_pattern_ops"],
                name="findings_component_prefix",
            ),
        ]

    def __str__(self) -> str:
        if self.kind == FindingKind.VULNERABILITY:
            return f"{self.vuln_id} in {self.component_name}@{self.component_version}"
        return self.title or f"{self.kind} finding {self.pk}"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    # --- the due date (FindingDue), None until ranked or set by hand ---

    @property
    def due_or_none(self) -> FindingDue | None:
        try:
            return self.due  # type: ignore[attr-defined,no-any-return]
        except ObjectDoesNotExist:
            return None

    @property
    def due_date(self) -> Any:
        d = self.due_or_none
        return None if d is None else d.due_date

    @property
    def due_date_manual(self) -> bool:
        d = self.due_or_none
        return d is not None and d.manual

    @property
    def due_decision(self) -> str:
        d = self.due_or_none
        return "" if d is None else d.decision

    @property
    def due_decision_since(self) -> Any:
        d = self.due_or_none
        return None if d is None else d.since

    @property
    def overdue(self) -> bool:
        """Open with a due date in the past (today is not overdue yet)."""
        return (
            self.due_date is not None
            and self.state in OPEN_STATES
            and self.due_date < timezone.localdate()
        )

    @property
    def open_status(self) -> str:
        return "open" if self.state in OPEN_STATES else "resolved"

    @property
    def category_display(self) -> str:
        return CATEGORY_LABELS.get(self.category, self.category or self.get_kind_display())

    @property
    def display_title(self) -> str:
        """What every page shows as the finding's title: the first line of its title (an
        advisory's summary, or its details' first line when it has none), else the
        vulnerability id, else the category."""
        return title_line(self.title) or self.vuln_id or self.category_display


class FindingDue(models.Model):
    """A finding's due date: from its ranking decision by the team's TriagePolicy (the day it
    first got that decision plus the policy's days for it), or set by a person (`manual`:
    ranking runs and policy changes leave it alone from then on).

    A narrow table of its own rather than columns of Finding: a team's first ranking run
    gives every finding a due date, and a million updates of the findings table (every one
    of its indexes, the trigram one among them, written again per row) took minutes, where
    a million rows here take seconds. No database foreign keys, as for RankedFinding (the
    ORM still cascades a finding's or a team's delete). A finding without a row has no
    due date."""

    finding = models.OneToOneField(
        Finding, on_delete=models.CASCADE, primary_key=True, related_name="due",
        db_constraint=False,
    )
    team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, related_name="+", db_index=False,
        db_constraint=False,
    )
    # The ranking decision the date counts from and the day the finding first got it
    # ('' and None until a ranking run has seen the finding).
    decision = models.CharField(max_length=16, blank=True, default="")
    since = models.DateField(null=True, blank=True)
    due_date = models.DateField(null=True, blank=True)
    manual = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Overdue counts and lists: the few rows due before a day, per team.
            models.Index(fields=["team", "due_date"], name="findingdue_team_due"),
        ]

    def __str__(self) -> str:
        return f"finding {self.finding_id} due {self.due_date}"


def due_cache_fill(findings: Iterable[Finding], *, known: bool = True) -> None:
    """Give each finding its FindingDue (or none) from one query, as select_related would:
    reading `due_date` of a finding loaded without it costs a query per finding. With
    `known=False` the findings are new and have none (no query)."""
    by_pk = {f.pk: f for f in findings}
    rows: dict[Any, FindingDue] = {}
    if known:
        ids = [pk for pk in by_pk if pk is not None]
        for i in range(0, len(ids), 5000):
            rows.update(FindingDue.objects.in_bulk(ids[i : i + 5000]))
    cache = Finding.due.related.set_cached_value  # type: ignore[attr-defined]
    for pk, f in by_pk.items():
        cache(f, rows.get(pk))


# Registered with the app here (Django loads an app's models from this module).
from trustrank.findings.records import (  # noqa: E402, F401
    AuditCheckpoint,
    AuditEvent,
    BulkTriageJob,
    Comment,
    EvidenceChange,
    FindingGroupsJob,
    TriagePolicy,
)


class SearchGroup(models.Model):
    """One half of findings' search text, once per distinct text: `part` COMPONENT_PART is
    the package name, component name and purl (`findings_component_text`), ADVISORY_PART the
    ids and aliases (`findings_advisory_text`); `id` is the text's 64-bit hash
    (`hashtextextended(text, part)`). `Finding.search_text` is the advisory half, a space,
    then the component half, so a search value without a space matches a finding exactly
    when it is a substring of one of the two.

    Filled by triggers on the findings table (migration findings.0016): every writer keeps
    it, and a text stays when its findings go (a text no finding has matches nothing). A
    ranked row holds its finding's component group (`RankedFinding.search_group`), so a
    package search finds its few groups here, through the trigram index, then reads each
    group's matches in rank order from the ranked rows' index (trustrank/findings/
    search_groups.py). Managed by the migration's SQL: the model is for reading."""

    COMPONENT_PART = 0
    ADVISORY_PART = 1

    id = models.BigIntegerField(primary_key=True)
    part = models.SmallIntegerField()
    text = models.TextField()

    class Meta:
        indexes = [
            GinIndex(fields=["text"], opclasses=["gin_trgm_ops"], name="searchgroup_text_trgm"),
        ]

    def __str__(self) -> str:
        return self.text
