"""Findings grouped for triage at team scale: by the upgrade that fixes them ("upgrade minimist
to 1.2.6 closes 4 findings in 3 projects") and by vulnerability across projects.

Both are one aggregate statement each over the filtered findings (the findings list's own
FilterSet builds the WHERE clause), never a load of the findings: a team may have a million.

By fix, the database groups by (ecosystem, package), orders the groups by urgency (highest
ranking decision, best rank, then how many findings) and cuts the page; only for that page's
groups does it aggregate the distinct (installed version, fixed versions) pairs. The version
math — which fixed version closes which finding — runs in Python over those pairs with the
vulnerability engine's per-ecosystem version parsing (trustrank.vulns.engine.versions), the
same comparison the OSV matcher uses.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import QuerySet

from trustrank.findings import group_kept
from trustrank.findings.choices import OPEN_STATES, FindingKind, TriageState
from trustrank.findings.generation import findings_generation
from trustrank.findings.group_shapes import (
    SEVERITY_ORDER,
    Bucket,
    FixGroup,
    GroupPage,
    ProjectRef,
    VulnerabilityGroup,
    decision_for_level,
    severity_for_level,
)
from trustrank.findings.group_sql import (
    RankSql,
    base_sql,
    group_order,
    group_page_sql,
    rank_of,
    teams_many,
)
from trustrank.findings.models import Finding
from trustrank.lib.single_flight import cache_get_or_compute_once
from trustrank.risk.inputs import DECISIONS
from trustrank.vulns.engine.versions import parse, scheme_for

GROUP_BY_CHOICES = ("fix", "vulnerability")
# Ids listed per group; the counts stay exact beyond it. A group of 100,000 findings is
# better opened in the findings list than shipped as ids.
MAX_IDS = 500
# SQL: the ranking decision as a level, immediate highest; unranked 0.
_LEVEL_SQL = (
    "CASE {col} "
    + " ".join(f"WHEN '{d}' THEN {i + 1}" for i, d in enumerate(DECISIONS))
    + " ELSE 0 END"
)
_SEVERITY_LEVEL_SQL = (
    "CASE {col} "
    + " ".join(
        f"WHEN '{s}' THEN {len(SEVERITY_ORDER) - i}" for i, s in enumerate(SEVERITY_ORDER)
    )
    + " ELSE 0 END"
)


# After decision, rank and key, the groups' order (group_sql.group_order): the larger first.
FIX_TAIL = ("n DESC", "ecosystem", "package_name")
VULNERABILITY_TAIL = ("n_open DESC", "n DESC", "vuln_id")


class GroupByError(ValueError):
    """An unknown `by`."""


# --- version math --------------------------------------------------------------------------


def smallest_fix_above(*, ecosystem: str, installed: str, fixed: list[str]) -> str | None:
    """The smallest fixed version greater than the installed one, or None (no fix, or not
    comparable in this ecosystem). When the installed version cannot be parsed, the greatest
    fix: the only one that surely is above it."""
    scheme = scheme_for(ecosystem=ecosystem, range_type="ECOSYSTEM")
    if scheme is None:
        return None
    candidates = [(v, text) for text in fixed if (v := parse(scheme, text)) is not None]
    if not candidates:
        return None
    current = parse(scheme, installed)
    if current is None:
        return max(candidates, key=lambda c: c[0])[1]
    above = [c for c in candidates if c[0] > current]
    return min(above, key=lambda c: c[0])[1] if above else None


def _greatest(ecosystem: str, versions: set[str]) -> str | None:
    scheme = scheme_for(ecosystem=ecosystem, range_type="ECOSYSTEM")
    if scheme is None or not versions:
        return None
    parsed = [(parse(scheme, v), v) for v in versions]
    return max(((p, v) for p, v in parsed if p is not None), key=lambda c: c[0])[1]


# --- the queries ---------------------------------------------------------------------------


def _tune(cursor: Any, statement_seconds: float = 0.0) -> None:
    """For this transaction only: enough work_mem to hash-aggregate the groups instead of
    sorting the findings on disk, and, `statement_seconds` above 0, a statement timeout (a
    web request's budget: `group_kept.cancelled_over_budget`; otherwise the session's
    stands, a job's included). (Every session runs without JIT, trustrank/settings: its
    compiling cost this query 1.5 s of 4.6 s on a million findings.)"""
    if statement_seconds > 0:
        cursor.execute("SELECT set_config('work_mem', '64MB', true), "
                       "set_config('statement_timeout', %s, true)",
                       [str(max(1, int(statement_seconds * 1000)))])
    else:
        cursor.execute("SELECT set_config('work_mem', '64MB', true)")


def fix_groups(
    *, qs: QuerySet[Finding], limit: int, offset: int, rank_sql: RankSql,
    statement_seconds: float = 0.0,
) -> GroupPage:
    """Open vulnerability findings of `qs` grouped by (ecosystem, package), most urgent first."""
    qs = qs.filter(kind=FindingKind.VULNERABILITY, state__in=OPEN_STATES)
    base, params = base_sql(qs)
    level = _LEVEL_SQL.format(col="b.g_decision")
    # Only the page's packages are read again (the (ecosystem, package_name) index) for the
    # per-version detail. A variant's rows are kept per team (the Python sums them): each
    # team's least key gives the rank of that team's part.
    page_sql = group_page_sql(
        base=base, keys=("ecosystem", "package_name"), level=level, rank_sql=rank_sql,
        tail=FIX_TAIL,
    )
    sql = f"""{page_sql},
        variant_teams AS (
            SELECT b.ecosystem, b.package_name, b.component_version,
                   b.g_fixed::text AS fixed, b.team_id,
                   count(*) AS n,
                   count(*) FILTER (WHERE b.in_kev) AS kev,
                   max({level}) AS level,
                   min(b.g_key) AS best_key,
                   array_agg(DISTINCT b.project_id) AS projects,
                   (array_agg(b.id ORDER BY b.g_key ASC NULLS LAST, b.id))[1:{MAX_IDS}] AS ids
            FROM ({base}) b
            JOIN page p ON p.ecosystem = b.ecosystem AND p.package_name = b.package_name
            GROUP BY b.ecosystem, b.package_name, b.component_version, b.g_fixed::text,
                     b.team_id
        ),
        variants AS (
            SELECT v.*, CASE WHEN v.best_key IS NOT NULL
                        THEN {rank_of(rank_sql, team="v.team_id", key="v.best_key")} END AS rank
            FROM variant_teams v
        )
        SELECT p.ecosystem, p.package_name, p.total,
               p.level, p.best_rank, p.n,
               json_agg(json_build_object(
                   'version', v.component_version, 'fixed', v.fixed, 'n', v.n, 'kev', v.kev,
                   'level', v.level, 'rank', v.rank, 'projects', v.projects, 'ids', v.ids
               ))
        FROM page p JOIN variants v
          ON v.ecosystem = p.ecosystem AND v.package_name = p.package_name
        GROUP BY p.ecosystem, p.package_name, p.total, p.level, p.best_rank, p.n,
                 p.order_rank, p.best_key
        ORDER BY {group_order(FIX_TAIL, alias="p")}
    """  # noqa: S608 (Django's own SQL and constants; values are parameters)
    with transaction.atomic(), connection.cursor() as cursor:
        _tune(cursor, statement_seconds)
        cursor.execute(sql, (*params, limit, offset, *params))
        rows = cursor.fetchall()
    total = rows[0][2] if rows else _group_count(qs, ("ecosystem", "package_name"))
    groups = []
    for ecosystem, package, _t, _level, _rank, n, variants in rows:
        if isinstance(variants, str):
            variants = json.loads(variants)
        groups.append(_fix_group(ecosystem, package, n, variants))
    # The projects' names are read when the page is shown (`_page_named`).
    return GroupPage(by="fix", count=total, groups=groups)


def _fix_group(
    ecosystem: str, package: str, total: int, variants: list[dict[str, Any]]
) -> FixGroup:
    closed, open_ = Bucket(), Bucket()
    targets: set[str] = set()
    for row in variants:
        fixed = json.loads(row["fixed"]) if row["fixed"] else []
        fix = smallest_fix_above(
            ecosystem=ecosystem,
            installed=row["version"] or "",
            fixed=[str(v) for v in fixed if v] if isinstance(fixed, list) else [],
        )
        if fix is None:
            open_.add(row)
        else:
            targets.add(fix)
            closed.add(row)
    target = _greatest(ecosystem, targets)
    if target is None and closed.count:
        # Cannot happen (every target parsed), but never claim a fix we cannot name.
        for row in variants:
            open_.add(row)
        closed = Bucket()
    return FixGroup(
        ecosystem=ecosystem,
        # SBOM-reported findings without a purl name no package.
        package=package or "(unnamed package)",
        target_version=target,
        findings_closed=closed.count,
        projects=tuple(ProjectRef(p, "") for p in sorted(closed.project_ids)),
        highest_decision=decision_for_level(closed.level if closed.count else open_.level),
        best_rank=closed.best_rank if closed.count else open_.best_rank,
        kev_count=closed.kev if closed.count else open_.kev,
        finding_ids=tuple(sorted(closed.ids)[:MAX_IDS]),
        no_fix_count=open_.count,
        no_fix_projects=tuple(ProjectRef(p, "") for p in sorted(open_.project_ids)),
        no_fix_finding_ids=tuple(sorted(open_.ids)[:MAX_IDS]),
        findings_total=total,
    )


def _page_named(page: GroupPage) -> GroupPage:
    """`page` with its projects' current names (one read for the page): a kept page
    (`finding_groups`) holds their ids only, as a renamed project moves no generation. A
    vulnerability group lists its projects by name."""
    from dataclasses import replace

    refs = [p for g in page.groups for p in (
        (*g.projects, *g.no_fix_projects) if isinstance(g, FixGroup) else g.projects)]
    names = _project_names({p.id for p in refs})

    def named(projects: tuple[ProjectRef, ...]) -> tuple[ProjectRef, ...]:
        return tuple(ProjectRef(p.id, names.get(p.id, "")) for p in projects)

    groups: list[Any] = []
    for g in page.groups:
        if isinstance(g, FixGroup):
            groups.append(replace(g, projects=named(g.projects),
                                  no_fix_projects=named(g.no_fix_projects)))
        else:
            groups.append(replace(g, projects=tuple(
                sorted(named(g.projects), key=lambda r: (r.name, r.id)))))
    return replace(page, groups=groups)


def _project_names(ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    # Through the finding's relation to its project, as for the ranks above.
    projects = Finding._meta.get_field("project").related_model
    return dict(projects._default_manager.filter(pk__in=ids).values_list("pk", "name"))


def _group_count(qs: QuerySet[Finding], fields: tuple[str, ...]) -> int:
    """Groups in all when the page is past the end (the page query then returns no row)."""
    return qs.order_by().values(*fields).distinct().count()


def vulnerability_groups(
    *, qs: QuerySet[Finding], limit: int, offset: int, rank_sql: RankSql,
    statement_seconds: float = 0.0,
) -> GroupPage:
    """Vulnerability findings of `qs` grouped by advisory group (`vuln_id`, the canonical id
    of the aliases) across projects, most urgent first."""
    qs = qs.filter(kind=FindingKind.VULNERABILITY)
    base, params = base_sql(qs)
    level = _LEVEL_SQL.format(col="b.g_decision")
    severity = _SEVERITY_LEVEL_SQL.format(col="b.severity")
    open_states = [str(s) for s in OPEN_STATES]
    states = ", ".join(
        f"'{s.value}', count(*) FILTER (WHERE b.state = '{s.value}')" for s in TriageState
    )
    # As for fixes, the page's groups are then read again for the detail (aliases are
    # aggregated as text: array_agg cannot stack arrays of different lengths).
    page_sql = group_page_sql(
        base=base, keys=("vuln_id",), level=level, rank_sql=rank_sql,
        per_team=("count(*) FILTER (WHERE b.state = ANY(%s)) AS n_open",
                  f"max({severity}) AS severity", "bool_or(b.in_kev) AS in_kev",
                  "max(b.cve_id) AS cve_id"),
        merged=("sum(t.n_open)::bigint AS n_open", "max(t.severity) AS severity",
                "bool_or(t.in_kev) AS in_kev", "max(t.cve_id) AS cve_id"),
        tail=VULNERABILITY_TAIL,
    )
    sql = f"""{page_sql},
        -- The ids in rank order: one team's by key; across teams by the ranks counted for
        -- each team's first MAX_IDS (no later one can be among the first MAX_IDS).
        placed AS (
            SELECT b.*, CASE WHEN {teams_many()} AND b.g_key IS NOT NULL AND row_number() OVER (
                                 PARTITION BY b.vuln_id, b.team_id ORDER BY b.g_key) <= {MAX_IDS}
                             THEN {rank_of(rank_sql, team="b.team_id", key="b.g_key")}
                        END AS g_rank
            FROM ({base}) b JOIN page p ON p.vuln_id = b.vuln_id
        ),
        detail AS (
            SELECT b.vuln_id,
                   json_build_object({states}) AS states,
                   array_agg(DISTINCT b.project_id) AS projects,
                   array_agg(DISTINCT b.component_name || '@' || b.component_version)
                       AS components,
                   array_agg(DISTINCT b.component_version) AS versions,
                   array_agg(DISTINCT b.package_name) AS packages,
                   array_agg(DISTINCT array_to_string(b.g_aliases, ' ')) AS aliases,
                   max(b.g_title) AS title,
                   (array_agg(b.id ORDER BY b.g_rank ASC NULLS LAST, b.g_key ASC NULLS LAST,
                              b.id))[1:{MAX_IDS}] AS ids
            FROM placed b
            GROUP BY b.vuln_id
        )
        SELECT g.vuln_id, g.total, g.level, g.best_rank, g.n, g.n_open, g.severity,
               g.in_kev, g.cve_id, d.aliases,
               d.states, d.projects, d.components, d.versions, d.packages, d.ids, d.title
        FROM page g
        JOIN detail d ON d.vuln_id = g.vuln_id
        ORDER BY {group_order(VULNERABILITY_TAIL, alias="g")}
    """  # noqa: S608 (Django's own SQL and constants; values are parameters)
    with transaction.atomic(), connection.cursor() as cursor:
        _tune(cursor, statement_seconds)
        cursor.execute(sql, (open_states, *params, limit, offset, *params))
        rows = cursor.fetchall()
    total = rows[0][1] if rows else _group_count(qs, ("vuln_id",))
    groups = []
    for (vuln_id, _t, level, best_rank, n, n_open, sev, in_kev, cve_id, aliases, states,
         projects, components, versions, packages, ids, title) in rows:
        if isinstance(states, str):
            states = json.loads(states)
        groups.append(
            VulnerabilityGroup(
                vuln_id=vuln_id,
                aliases=tuple(sorted({a for text in aliases or [] for a in (text or "").split()})),
                cve_id=cve_id or "",
                severity=severity_for_level(sev),
                in_kev=bool(in_kev),
                findings_count=n,
                open_count=n_open,
                states={k: v for k, v in (states or {}).items() if v},
                # Named and put in name order when shown (`_page_named`).
                projects=tuple(ProjectRef(p, "") for p in sorted(p for p in projects or [] if p)),
                components=tuple(c for c in components or [] if c and c != "@"),
                versions=tuple(v for v in versions or [] if v),
                packages=tuple(p for p in packages or [] if p),
                highest_decision=decision_for_level(level),
                best_rank=best_rank,
                finding_ids=tuple(ids or []),
                title=title or "",
            )
        )
    return GroupPage(by="vulnerability", count=total, groups=groups)


def page_computed(
    *, qs: QuerySet[Finding], by: str, limit: int, offset: int, rank_sql: RankSql,
    statement_seconds: float = 0.0,
) -> GroupPage:
    """The page of `qs`'s groups by `by` computed now, projects unnamed (`_page_named`);
    each statement cancelled after `statement_seconds` when above 0."""
    grouped = fix_groups if by == "fix" else vulnerability_groups
    return grouped(qs=qs, limit=limit, offset=offset, rank_sql=rank_sql,
                   statement_seconds=statement_seconds)


def finding_groups(
    *, qs: QuerySet[Finding], by: str, limit: int, offset: int, rank_sql: RankSql,
    team_ids: Iterable[int] | None = None, filter_params: Any = None,
) -> GroupPage:
    """Dispatch on `by` ("fix" or "vulnerability"); GroupByError for anything else.

    With `team_ids` (the caller's teams, which `qs` is limited to), the page is kept under
    their findings generation (`generation.findings_generation`), the filter's SQL, `by` and
    the slice, and computed by one web worker at a time (`single_flight`): a team of ten
    million findings waits ~25 s for a page, and every analyst opening it would otherwise
    ask PostgreSQL for the same aggregate side by side. With `filter_params` too (the query
    string `qs`'s FilterSet read), a page that took long is kept in PostgreSQL and, once
    the generation moved on, shown as it was while a job groups it again (`group_kept`)."""
    if by not in GROUP_BY_CHOICES:
        raise GroupByError(f"`by` must be one of {', '.join(GROUP_BY_CHOICES)}, not {by!r}")

    def compute(statement_seconds: float = 0.0) -> GroupPage:
        return page_computed(qs=qs, by=by, limit=limit, offset=offset, rank_sql=rank_sql,
                             statement_seconds=statement_seconds)

    if team_ids is None:
        return _page_named(compute())
    try:
        sql, params = qs.order_by().query.sql_with_params()
    except EmptyResultSet:
        return GroupPage(by=by, count=0, groups=[])
    teams = tuple(sorted(set(team_ids)))
    digest = hashlib.sha256(repr((sql, params, by, limit, offset)).encode()).hexdigest()[:32]
    generation = findings_generation(team_ids=teams)
    key = f"finding-groups:{generation}:{digest}"
    refresh_above = settings.TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS
    ask = None
    if filter_params is not None and refresh_above > 0:
        ask = group_kept.PageAsk(
            team_ids=teams, filter={k: filter_params.getlist(k) for k in filter_params},
            by=by, limit=limit, offset=offset,
            key=hashlib.sha256(repr((teams, digest)).encode()).hexdigest())
        page = cache.get(key)
        if page is not None:
            return _page_named(page)
        kept, pending = group_kept.kept_latest(ask.key)
        if kept is not None and kept.generation == generation:
            cache.set(key, kept.page, timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL)
            return _page_named(kept.page)
        if kept is not None:
            group_kept.refresh_request(ask, not_before=group_kept.regroup_after(kept))
            return _page_named(group_kept.page_stale(kept))
        if pending:
            return group_kept.page_pending(by)

    def computed_and_kept() -> GroupPage:
        started = time.perf_counter()
        if ask is None:
            page = compute()
        else:
            try:
                with group_kept.cancelled_over_budget():
                    page = compute(settings.TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS)
            except group_kept.OverBudget:
                # A job groups it; the web workers waiting on this one find the answer.
                group_kept.refresh_request(ask)
                cache.set(key, group_kept.page_pending(by), timeout=PENDING_KEPT_SECONDS)
                raise
        seconds = time.perf_counter() - started
        if ask is not None and seconds >= refresh_above:
            group_kept.page_keep(ask, page=page, generation=generation, seconds=seconds)
        return page

    try:
        page = cache_get_or_compute_once(
            key, computed_and_kept, timeout=settings.TRUSTRANK_FINDINGS_COUNT_TTL,
            wait=settings.TRUSTRANK_FINDINGS_GROUPS_WAIT_SECONDS,
        )
    except group_kept.OverBudget:
        return group_kept.page_pending(by)
    return _page_named(page)


# How long "being grouped" is kept under a page's generation once its statement ran past the
# request's budget: the web workers waiting on that request take it, and a later view reads
# the job's row (`group_kept.kept_latest`) or its page.
PENDING_KEPT_SECONDS = 3
