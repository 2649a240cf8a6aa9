"""The rows of an export: the filtered findings of one team with their triage (now, or as the
audit trail says it was at `as_of`), their rank, decision and explanation (from the latest
ranking run, or the one a past time or `ranking_run` names), read through a server-side
cursor so memory stays bounded however many findings match.

What a past ranking run can give back: RankedFinding holds only the latest ranks; each run
stores a RankChange row for every finding whose rank, score or decision it changed (the
team's first run stores none). So a past run's rank, score and decision are rebuilt exactly:
the latest change at or before that run, else the `previous_*` of the first change after it,
else the current value (nothing changed since). The env_rank and the explanation (the
factors) are kept for the latest ranking only; for a past run they are left blank, and the
export's metadata says so.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.postgres.aggregates import StringAgg
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Exists,
    F,
    FloatField,
    Func,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat, NullIf
from django.http import QueryDict

from trustrank.exports.services.params import ExportRequest
from trustrank.exports.services.queue_ranks import queue_ranks, queue_ranks_unread
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.ranking.models import RankChange, RankContext, RankingRun, RunStatus
from trustrank.runtime.models import Deployment

# Rows fetched per round trip of the server-side cursor.
CHUNK_ROWS = 2000

# The columns of every export, in order (CSV header, JSON keys).
COLUMNS = (
    "finding_id", "kind", "category", "title", "state", "justification", "response", "detail",
    "assignee", "due_date", "severity", "cvss", "epss", "kev", "vuln_id", "aliases", "cve",
    "project", "version", "component_purl", "environment", "service", "rank", "env_rank",
    "score", "decision", "explanation", "first_seen", "last_seen", "resolved_at",
)

# Filters that, with as_of, apply to the triage state of that time rather than today's.
_STATE_FILTERS = ("state", "open")

_FIELDS = (
    "id", "kind", "category", "title", "state", "justification", "response", "detail",
    "assignee__username", "due__due_date", "severity", "cvss_score", "epss", "in_kev", "vuln_id",
    "aliases", "cve_id", "project__name", "project_version__version", "project_version_id",
    "component_purl", "component_name", "component_version", "environment_", "service_",
    "rank_", "env_rank_", "score_", "decision_", "context_", "first_seen", "last_seen",
    "resolved_at", "fixed_versions",
)


@dataclass
class RankSource:
    """Where the ranks come from, as the export's metadata tells it."""

    run_id: int | None
    kind: str  # "latest", "past_run" or "none"
    note: str = ""


@dataclass
class ExportSelection:
    queryset: QuerySet[Finding]
    ranks: RankSource
    notes: list[str] = field(default_factory=list)
    # The project version a CycloneDX VEX document describes (product.product_data).
    product: dict[str, Any] | None = None

    def metadata(self) -> dict[str, Any]:
        return {
            "ranking_run": self.ranks.run_id,
            "ranks": self.ranks.kind,
            "notes": [*self.notes, *([self.ranks.note] if self.ranks.note else [])],
            **({"product": self.product} if self.product is not None else {}),
        }


def _filter_data(filters: dict[str, list[str]], *, skip: tuple[str, ...] = ()) -> QueryDict:
    data = QueryDict(mutable=True)
    for name, values in filters.items():
        if name not in skip:
            data.setlist(name, values)
    return data


def _latest_done_run(team_id: int, *, before: datetime | None = None) -> RankingRun | None:
    runs = RankingRun.objects.filter(team_id=team_id, status=RunStatus.DONE)
    if before is not None:
        runs = runs.filter(finished_at__lte=before)
    return runs.order_by("-finished_at", "-id").first()


def _rank_source(req: ExportRequest) -> tuple[RankSource, RankingRun | None]:
    latest = _latest_done_run(req.team_id)
    run: RankingRun | None
    if req.ranking_run_id is not None:
        run = RankingRun.objects.get(pk=req.ranking_run_id)
    elif req.as_of is not None:
        run = _latest_done_run(req.team_id, before=req.as_of)
        if run is None:
            return RankSource(None, "none", "no ranking run had finished at as_of"), None
    else:
        if latest is None:
            return RankSource(None, "none", "the team has no finished ranking run"), None
        return RankSource(latest.pk, "latest"), latest
    if latest is not None and run.pk == latest.pk:
        return RankSource(run.pk, "latest"), run
    return (
        RankSource(
            run.pk,
            "past_run",
            f"ranks, scores and decisions of ranking run {run.pk} are rebuilt from its "
            "RankChange history; env_rank and explanation are stored for the latest run only "
            "and are left blank",
        ),
        run,
    )


def _past_rank(column: str, run_id: int) -> Any:
    """The value of a RankChange column (rank, score, decision) as ranking run `run_id` left
    it for the outer finding. History holds a finding's own changes only (a rank that
    shifted because others moved has no row), so the rank is rebuilt from the keys:
    `_ranks_as_of`."""
    if column == "rank":
        # A constant statement, the run's id passed as a parameter.
        return Cast(Func(RawSQL(_RANKS_AS_OF, [run_id, run_id, run_id]),  # noqa: S611
                         Cast(F("pk"), CharField()), arg_joiner=" ->> ",
                         template="(%(expressions)s)", output_field=CharField()),
                    IntegerField())
    upto = RankChange.objects.filter(finding=OuterRef("pk"), run_id__lte=run_id)
    after = RankChange.objects.filter(finding=OuterRef("pk"), run_id__gt=run_id)
    current = {"score": "ranked__score", "decision": "ranked__decision"}
    return Case(
        When(Exists(upto), then=Subquery(upto.order_by("-run_id", "-id").values(column)[:1])),
        When(
            Exists(after),
            then=Subquery(after.order_by("run_id", "id").values(f"previous_{column}")[:1]),
        ),
        default=F(current[column]),
    )


# Finding id (as text) -> rank at ranking run %s, for the findings of that run's team, as
# one JSON object made once per export (an uncorrelated subquery; a row's lookup is a
# binary search of its keys). A finding's key as of the run: the `qkey` of its latest
# change at or before it (none when that change took it out of the queue), else the
# `previous_qkey` of its earliest change after it (none when that change put it in), else
# its ranked row's key; its rank is its place among the team's findings ranked then by
# (key, id). A history row from before the keys were recorded has a rank and no key: that
# rank is taken as it was written (history then had every shift). The ranked rows are
# joined on the team too: PostgreSQL then reads the team's partition and only probes the
# others' indexes, where on the finding alone it scanned every team's rows into its hash.
_RANKS_AS_OF = """(SELECT jsonb_object_agg(r.finding_id, r.rank) FROM (
  SELECT a.finding_id,
    coalesce(a.legacy, row_number() OVER (ORDER BY a.k NULLS LAST, a.finding_id)) AS rank
  FROM (SELECT f.id AS finding_id,
          CASE WHEN up.rank IS NOT NULL THEN up.qkey WHEN up.at IS NOT NULL THEN NULL
               WHEN aft.previous_rank IS NOT NULL THEN aft.previous_qkey
               WHEN aft.at IS NOT NULL THEN NULL ELSE rf.qkey END AS k,
          CASE WHEN up.at IS NOT NULL THEN up.rank IS NOT NULL
               WHEN aft.at IS NOT NULL THEN aft.previous_rank IS NOT NULL
               ELSE rf.finding_id IS NOT NULL END AS ranked,
          CASE WHEN up.at IS NOT NULL THEN
                 CASE WHEN up.qkey IS NULL THEN up.rank END
               WHEN aft.previous_qkey IS NULL THEN aft.previous_rank END AS legacy
        FROM findings_finding f
        LEFT JOIN ranking_rankedfinding rf ON rf.finding_id = f.id AND rf.team_id = f.team_id
        LEFT JOIN LATERAL (SELECT c.rank, c.qkey, c.at FROM ranking_rankchange c
          WHERE c.finding_id = f.id AND c.run_id <= %s ORDER BY c.run_id DESC, c.id DESC
          LIMIT 1) up ON true
        LEFT JOIN LATERAL (SELECT c.previous_rank, c.previous_qkey, c.at
          FROM ranking_rankchange c WHERE c.finding_id = f.id AND c.run_id > %s
          ORDER BY c.run_id, c.id LIMIT 1) aft ON true
        WHERE f.team_id = (SELECT team_id FROM ranking_rankingrun WHERE id = %s)) a
  WHERE a.ranked) r)"""


def export_selection(req: ExportRequest) -> ExportSelection:
    """The queryset an export reads (values rows named as in _FIELDS) and what its metadata
    must say about where states and ranks come from."""
    base = Finding.objects.filter(team_id=req.team_id)
    notes: list[str] = []
    data = _filter_data(req.filters, skip=_STATE_FILTERS if req.as_of is not None else ())
    if req.as_of is not None or not ({"state", "open"} & req.filters.keys()):
        # An export has every state unless the caller chose (a VEX document without its
        # not_affected statements would say little), and with as_of the states of that
        # time are filtered below, not today's. `open=all` keeps a FilterSet that shows
        # open findings by default from narrowing.
        data["open"] = "all"
    qs = FindingFilterSet(data, queryset=base).qs
    if req.as_of is not None:
        # The triage state of that time: the last audit event that set a state, at or before
        # it; findings TrustRank had not yet seen are left out.
        last = (
            AuditEvent.objects.filter(
                finding=OuterRef("pk"), created_at__lte=req.as_of, after__has_key="state"
            )
            .order_by("-created_at", "-id")
        )
        qs = qs.filter(created_at__lte=req.as_of).annotate(
            as_of_after=Subquery(last.values("after")[:1]),
            as_of_at=Subquery(last.values("created_at")[:1]),
        )
        qs = qs.annotate(as_of_state=KT("as_of_after__state"))
        # Every triage event records the assignee (reconcile.state_of): theirs at that time,
        # nobody when it said none; today's only where the event predates the field.
        who = get_user_model().objects.filter(pk=OuterRef("as_of_assignee_id"))
        qs = qs.annotate(
            as_of_assignee_id=Cast(KT("as_of_after__assignee"), BigIntegerField())
        ).annotate(
            as_of_assignee=Case(
                When(
                    as_of_after__has_key="assignee",
                    then=Coalesce(Subquery(who.values("username")[:1]), Value("")),
                ),
                default=F("assignee__username"),
                output_field=CharField(),
            )
        )
        states = req.filters.get("state")
        if states:
            qs = qs.filter(as_of_state__in=states)
        open_ = (req.filters.get("open") or [""])[0].lower()
        if open_ in ("true", "1", "yes"):
            qs = qs.filter(as_of_state__in=OPEN_STATES)
        elif open_ in ("false", "0", "no"):
            qs = qs.exclude(as_of_state__in=OPEN_STATES)
        notes.append(
            "state, justification, response, detail, resolved_at "
            "and assignee are as the audit trail says they were at as_of; other columns "
            "(due_date, scores, last_seen) are current"
        )
    ranks, run = _rank_source(req)
    if ranks.kind == "past_run" and run is not None:
        qs = qs.annotate(
            rank_=_past_rank("rank", run.pk),
            score_=_past_rank("score", run.pk),
            decision_=_past_rank("decision", run.pk),
            env_rank_=Value(None, output_field=IntegerField()),
            context_=Value(None, output_field=CharField()),
        )
    elif ranks.kind == "none":
        qs = qs.annotate(
            rank_=Value(None, output_field=IntegerField()),
            score_=Value(None, output_field=FloatField()),
            decision_=Value("", output_field=CharField()),
            env_rank_=Value(None, output_field=IntegerField()),
            context_=Value(None, output_field=CharField()),
        )
    else:
        rank, env_rank = queue_ranks(qs, team_id=req.team_id)
        qs = qs.annotate(
            rank_=rank,
            score_=F("ranked__score"),
            decision_=F("ranked__decision"),
            env_rank_=env_rank,
            context_=F("ranked__context_id"),
        )
    # Nothing ranked (a constant NULL rank may not stand in an ORDER BY): the tiebreaks only.
    qs = _with_deployments(qs).order_by(*(RANK_ORDER if ranks.kind != "none" else RANK_ORDER[1:]))
    fields = list(_FIELDS)
    if req.as_of is not None:
        fields += ["as_of_after", "as_of_at", "as_of_assignee"]
    return ExportSelection(queryset=qs.values(*fields), ranks=ranks, notes=notes)


# Rows in rank order (the rank of the run the export reads: the latest, or the one as_of or
# ranking_run names); findings that run did not rank (closed ones, or newer than it) after
# the ranked ones, most severe first; the id breaks the remaining ties, so two exports of
# the same data list the rows in the same order.
RANK_ORDER = (F("rank_").asc(nulls_last=True), F("baseline_priority").desc(), F("id").asc())


def _deployed(column: str) -> Subquery:
    """The environments (or the services) that run the outer finding's project version, joined
    by `;`, in one order for both columns: the i-th service runs in the i-th environment."""
    deployments = (
        Deployment.objects.filter(project_version_id=OuterRef("project_version_id"))
        .order_by()
        .values("project_version_id")
    )
    service = Case(
        When(namespace="", then=F("service_name")),
        default=Concat(F("namespace"), Value("/"), F("service_name")),
        output_field=CharField(),
    )
    value = F("environment__name") if column == "environment" else service
    joined = StringAgg(
        value, delimiter=";",
        order_by=(F("environment__name"), F("namespace"), F("service_name")),
    )
    return Subquery(deployments.annotate(joined=joined).values("joined")[:1])


def _with_deployments(qs: QuerySet[Finding]) -> QuerySet[Finding]:
    """`environment_` and `service_`: the finding's own (runtime findings name them), else
    where its project version is deployed (the Deployment rows of today, also for as_of)."""
    return qs.annotate(
        environment_=Coalesce(
            NullIf(F("environment"), Value("")), _deployed("environment"),
            output_field=CharField(),
        ),
        service_=Coalesce(F("service__name"), _deployed("service"), output_field=CharField()),
    )


class _Explanations:
    """The factors of each rank context, read once per context: a million findings share a
    few thousand contexts. A bounded LRU, so an export of many contexts stays small too."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.cache: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def get(self, digest: str | None) -> list[dict[str, Any]] | None:
        if not digest:
            return None
        hit = self.cache.get(digest)
        if hit is not None:
            self.cache.move_to_end(digest)
            return hit
        data = RankContext.objects.filter(digest=digest).values_list("data", flat=True).first()
        factors = list((data or {}).get("explanation") or [])
        self.cache[digest] = factors
        if len(self.cache) > self.size:
            self.cache.popitem(last=False)
        return factors


def _row(v: dict[str, Any], explanations: _Explanations) -> dict[str, Any]:
    state, justification, response, detail = (
        v["state"], v["justification"], v["response"], v["detail"]
    )
    resolved_at = v["resolved_at"]
    if "as_of_after" in v:
        after = v["as_of_after"] or {}
        state = after.get("state", state)
        justification = after.get("justification", "")
        response = after.get("response", [])
        detail = after.get("detail", "")
        resolved_at = None if state in OPEN_STATES else v["as_of_at"]
    return {
        "finding_id": v["id"],
        "kind": v["kind"],
        "category": v["category"],
        "title": v["title"],
        "state": state,
        "justification": justification,
        "response": list(response or []),
        "detail": detail,
        "assignee": v.get("as_of_assignee", v["assignee__username"]) or "",
        "due_date": v["due__due_date"],
        "severity": v["severity"],
        "cvss": v["cvss_score"],
        "epss": v["epss"],
        "kev": v["in_kev"],
        "vuln_id": v["vuln_id"],
        "aliases": list(v["aliases"] or []),
        "cve": v["cve_id"],
        "project": v["project__name"] or "",
        "version": v["project_version__version"] or "",
        "component_purl": v["component_purl"],
        "environment": v["environment_"] or "",
        "service": v["service_"] or "",
        "rank": v["rank_"],
        "env_rank": v["env_rank_"],
        "score": v["score_"],
        "decision": v["decision_"] or "",
        "explanation": explanations.get(v["context_"]),
        "first_seen": v["first_seen"],
        "last_seen": v["last_seen"],
        "resolved_at": resolved_at,
        # Not columns: what the VEX formats need besides.
        "_project_version_id": v["project_version_id"],
        "_component_name": v["component_name"],
        "_component_version": v["component_version"],
        "_fixed_versions": v["fixed_versions"] or [],
    }


def export_rows(
    selection: ExportSelection, *, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The rows, one dict each (COLUMNS, plus `_`-prefixed extras), read in chunks through a
    server-side cursor: nothing holds more than a chunk of findings at a time."""
    qs = selection.queryset
    if limit is not None:
        qs = qs[:limit]
    explanations = _Explanations()
    values: Iterator[dict[str, Any]] = qs.iterator(chunk_size=CHUNK_ROWS)  # type: ignore[assignment]
    for v in values:
        yield _row(v, explanations)


def export_count(selection: ExportSelection, *, cap: int | None = None) -> int:
    qs = selection.queryset.order_by().values("pk")
    # A count reads no rank: the queue's numbering is left out (PostgreSQL cannot drop a join
    # to a derived table by itself, and it would number the team's whole queue).
    queue_ranks_unread(qs)
    if cap is not None:
        return int(qs[: cap + 1].count())
    return int(qs.count())
