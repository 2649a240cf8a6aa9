"""Gather one team's evidence from PostgreSQL into the engine's plain inputs (RankInputs).

Everything the engine reads comes through here, as frozen records keyed by names (no model
instances cross into trustrank.risk). Volumes: findings are read with values_list in
chunks (a million open findings is the design point); graph evidence (services, edges,
library use) is aggregated over the ranking window in SQL.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import repeat
from operator import itemgetter
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from trustrank.findings.models import OPEN_STATES
from trustrank.findings.services.due_dates import (
    PolicyDays,
    settled_decision_sql,
    triage_policy_for,
)
from trustrank.identity.models import Identity
from trustrank.inventory.models import Component
from trustrank.ranking.entry_points import (
    declared_rows,
    declared_services,
    entry_points_read,
    routes_for,
)
from trustrank.risk import inputs as ri
from trustrank.risk.libraries import (
    Evidence,
    component_key_from_purl,
    library_map,
    observed_components,
)
from trustrank.runtime.deployment import deployments_from_telemetry
from trustrank.runtime.models import (
    Deployment,
    DeploymentSource,
    LibraryBucket,
    NodeKind,
    Service,
)
from trustrank.runtime.services.ingress import ingress_override_text
from trustrank.vulns.models import Advisory, EpssLatest

CHUNK = 20_000


@dataclass(frozen=True)
class Gathered:
    inputs: ri.RankInputs
    # finding id (text) -> database id, and the settings the inputs were made for.
    finding_ids: dict[str, int]
    window_minutes: float
    # A full gather's open findings whose due date is settled for a decision (finding
    # database id -> that decision) under `policy`, the team's policy when it read them:
    # a ranking run recomputes due dates only where the new decision differs.
    settled: dict[int, str] | None = None
    policy: PolicyDays | None = None
    # With `settled`: the open findings that have a due-date row not settled for any
    # decision (few). A finding in neither has no row: its due date can be inserted.
    unsettled_rows: frozenset[int] | None = None
    # An incremental gather's findings that are new, read again or closed since the
    # previous gather (every other record is the previous one, the same object).
    touched: frozenset[str] | None = None
    # The current records of those still open (read again or new).
    delta: tuple[ri.Finding, ...] | None = None
    graph: GraphRead | None = None


def rank_settings() -> ri.RankSettings:
    """The engine's settings from Django settings (weights are documented in
    docs/ranking.md and versioned with every run)."""
    w = settings.TRUSTRANK_RANKING_WEIGHTS
    base = ri.ScoreWeights()
    weights = ri.ScoreWeights(**{k: float(w.get(k, getattr(base, k))) for k in base.__slots__})
    return ri.RankSettings(
        version=settings.TRUSTRANK_RANKING_WEIGHTS_VERSION,
        epss_poc_threshold=settings.TRUSTRANK_RANKING_EPSS_POC_THRESHOLD,
        weights=weights,
        library_map=tuple(
            (table, name, key) for table, name, key in settings.TRUSTRANK_LIBRARY_MAP
        ),
        window_minutes=float(settings.TRUSTRANK_RANKING_WINDOW_MINUTES),
    )


def _window() -> tuple[datetime, float]:
    minutes = settings.TRUSTRANK_RANKING_WINDOW_MINUTES
    return timezone.now() - timedelta(minutes=minutes), float(minutes)


# The explanations' "recent" rate: calls in the last hour of the window.
RECENT_MINUTES = 60


@dataclass(frozen=True)
class _Rates:
    """How per-bucket counts become the explanations' recent and peak rates. Only with
    buckets of at most a minute (the trace aggregation's default) and a window of at least
    an hour; otherwise explanations give the window's average alone."""

    recent_since: datetime
    bucket_minutes: float
    enabled: bool

    @classmethod
    def for_window(cls, since: datetime, minutes: float) -> _Rates:
        bucket_minutes = settings.TRUSTRANK_TRACE_BUCKET_SECONDS / 60
        return cls(
            recent_since=since + timedelta(minutes=minutes - RECENT_MINUTES),
            bucket_minutes=bucket_minutes,
            enabled=bucket_minutes <= 1 and minutes >= RECENT_MINUTES,
        )

    def recent(self, count: Any) -> float | None:
        return round(int(count or 0) / RECENT_MINUTES, 4) if self.enabled else None

    def peak(self, count: Any) -> float | None:
        return round(int(count or 0) / self.bucket_minutes, 4) if self.enabled else None


def _identities(team_id: int) -> dict[tuple[str, str], tuple[float, str]]:
    """(environment, service) -> (strength, SPIFFE ID) of its strongest attested identity:
    a valid certificate whose SPIFFE ID belongs to a configured trust bundle."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    rows = (
        Identity.objects.filter(
            team_id=team_id, best_certificate__isnull=False, strength__gt=0,
            trust_domain_known=True,
        )
        .exclude(service_name="")
        .values_list("environment", "service_name", "strength", "spiffe_id")
    )
    for env, service, strength, spiffe_id in rows:
        key = (env, service)
        if key not in out or (strength, spiffe_id) > out[key]:
            out[key] = (float(strength), spiffe_id)
    return out


# Sums cast back to bigint: the ORM's Sum over a bigint column converted PostgreSQL's
# numeric to int, and the rates below must be computed from ints as before.
_EDGES_SQL = """
SELECT b.caller_id, b.callee_id, sum(b.calls)::bigint, sum(b.errors)::bigint,
       sum(b.mtls_calls)::bigint,
       -- One row per (caller, callee, bucket): the busiest bucket is max(calls).
       (sum(b.calls) FILTER (WHERE b.bucket_start >= %s))::bigint, max(b.calls)
  FROM runtime_calledgebucket b
  JOIN runtime_environment e ON e.id = b.environment_id
 WHERE e.team_id = %s AND b.bucket_start >= %s
 GROUP BY b.caller_id, b.callee_id
"""


# The ingress mark: the row's own, else the one set on its deployment before its first trace
# (runtime.services.ingress.ingress_mark_holder).
_SERVICES_SQL = """
SELECT s.id, e.name, s.kind, s.namespace, s.name,
       COALESCE(s.ingress_override, d.ingress_override),
       (CASE WHEN jsonb_typeof(s.attributes) = 'object'
             THEN s.attributes -> 'trustrank.ingress' END)::text,
       CASE WHEN s.ingress_override IS NULL AND d.ingress_override IS NOT NULL
            THEN d.ingress_set_by_label ELSE s.ingress_set_by_label END,
       CASE WHEN s.ingress_override IS NULL AND d.ingress_override IS NOT NULL
            THEN d.ingress_set_via ELSE s.ingress_set_via END,
       CASE WHEN s.ingress_override IS NULL AND d.ingress_override IS NOT NULL
            THEN d.ingress_set_at ELSE s.ingress_set_at END,
       (CASE WHEN jsonb_typeof(s.attributes) = 'object'
             THEN jsonb_build_array(s.attributes ->> 'trustrank.ingress.client',
                                    s.attributes ->> 'k8s.cluster.name',
                                    s.attributes ->> 'k8s.namespace.name') END)::text
  FROM runtime_service s
  JOIN runtime_environment e ON e.id = s.environment_id
  LEFT JOIN runtime_deployment d
    ON s.kind = 'service' AND d.environment_id = s.environment_id
   AND d.namespace = s.namespace AND d.service_name = s.name
 WHERE e.team_id = %s
 ORDER BY s.kind, s.namespace, s.name
"""


@dataclass(frozen=True)
class GraphRead:
    """The graph part of a gather: what was read (`key`) and the records made of it.
    A next gather that reads equal rows reuses these very records, so the engine knows
    without hashing them that the graph did not change."""

    key: tuple[Any, ...]
    services: tuple[ri.Service, ...]
    edges: tuple[ri.CallEdge, ...]
    peers: tuple[ri.ExternalPeer, ...]
    origins: tuple[ri.RootSpanOrigin, ...]
    names: dict[int, tuple[str, str]]


def _graph(
    team_id: int, since: datetime, minutes: float, rates: _Rates,
    previous: GraphRead | None = None,
) -> GraphRead:
    identities = _identities(team_id)
    # Raw SQL: only one attribute is read, so the rest of each service's attributes is
    # neither sent nor decoded (the ORM parsed ten thousand JSON documents per run).
    with connection.cursor() as cur:
        cur.execute(_SERVICES_SQL, [team_id])
        rows = cur.fetchall()
    # Raw SQL: fifty thousand aggregated edges through the ORM cost half a second of
    # converters per run.
    with connection.cursor() as cur:
        cur.execute(_EDGES_SQL, [rates.recent_since, team_id, since])
        agg = cur.fetchall()
    local = list(_local_origins(team_id, since))
    entries = entry_points_read(team_id)
    declared = declared_rows(team_id)
    key = (rows, declared, identities, agg, local, entries, minutes, rates.enabled,
           rates.bucket_minutes)
    if previous is not None and previous.key == key:
        return previous
    services: list[ri.Service] = []
    peers: list[ri.ExternalPeer] = []
    names: dict[int, tuple[str, str]] = {}
    kinds: dict[int, str] = {}
    clients: dict[int, str] = {}
    for (pk, env, kind, namespace, name, override, ingress, set_by, set_via, set_at,
         attrs) in rows:
        names[pk] = (env, name)
        kinds[pk] = kind
        if kind == NodeKind.SERVICE:
            strength, spiffe = identities.get((env, name), (None, ""))
            client, k8s_cluster, k8s_namespace = json.loads(attrs) if attrs else (None,) * 3
            if client:
                clients[pk] = client
            # A Kubernetes Service of type LoadBalancer or NodePort, an Ingress or HTTPRoute
            # backend (cluster.ClusterEntryPoint), or the attribute that says so.
            routes = routes_for(entries, name=name, cluster=k8s_cluster,
                                 namespace=k8s_namespace)
            services.append(
                ri.Service(
                    environment=env,
                    name=name,
                    namespace=namespace,
                    ingress_candidate=bool(ingress is not None and json.loads(ingress))
                    or bool(routes),
                    ingress_override=override,
                    ingress_detail=(
                        ingress_override_text(value=override, by=set_by, via=set_via,
                                              at=set_at)
                        if override is not None else "; ".join(routes)
                    ),
                    identity_strength=strength,
                    identity=spiffe,
                )
            )
        elif kind == NodeKind.EXTERNAL:
            peers.append(ri.ExternalPeer(environment=env, name=name, address_class="internet"))
    services += declared_services(declared, entries=entries, identities=identities)
    edges: list[ri.CallEdge] = []
    origins: list[ri.RootSpanOrigin] = []
    for caller, callee, total, errors, mtls, recent, peak in agg:
        if callee not in names or caller not in names:
            continue
        env, callee_name = names[callee]
        calls = int(total or 0)
        if kinds[caller] == NodeKind.INTERNET:
            # Root server spans whose caller is outside: the aggregation only records an
            # internet edge for public or absent client addresses.
            origins.append(
                ri.RootSpanOrigin(
                    environment=env, service=callee_name, address_class="internet", spans=calls,
                    example_address=clients.get(callee, ""),
                )
            )
            continue
        if kinds[callee] == NodeKind.INTERNET:
            continue
        mtls_share = (mtls or 0) / calls if calls else 0.0
        caller_name = names[caller][1]
        callee_identity = identities.get((env, callee_name))
        caller_identity = identities.get((env, caller_name))
        # The hop's identity strength: how well the callee knows who called. Full only
        # when every call carried mTLS and the caller holds an attested identity.
        sig = (caller_identity[0] if caller_identity else 0.0) * mtls_share
        if callee_identity is None and caller_identity is None:
            sig = 0.0
        edges.append(
            ri.CallEdge(
                environment=env,
                caller=caller_name,
                callee=callee_name,
                calls_per_minute=round(calls / minutes, 4),
                error_rate=round((errors or 0) / calls, 4) if calls else 0.0,
                mtls_share=round(mtls_share, 4),
                sig=round(sig, 2),
                recent_calls_per_minute=rates.recent(recent),
                peak_calls_per_minute=rates.peak(peak),
            )
        )
    for env, name, count, example in local:
        origins.append(
            ri.RootSpanOrigin(
                environment=env, service=name, address_class=count[0], spans=count[1],
                example_address=example,
            )
        )
    return GraphRead(key, tuple(services), tuple(edges), tuple(peers), tuple(origins), names)


def _local_origins(team_id: int, since: datetime) -> Iterator[tuple[str, str, Any, str]]:
    """Root spans from loopback or private callers in the window, which the aggregation
    counts per minute as `origin` evidence instead of internet edges."""
    rows = (
        LibraryBucket.objects.filter(
            service__environment__team_id=team_id, bucket_start__gte=since, kind="origin"
        )
        .values("service__environment__name", "service__name", "name")
        .annotate(spans=Sum("spans"))
    )
    for row in rows:
        if row["name"] in ("local", "internal") and row["spans"]:
            yield (
                row["service__environment__name"], row["service__name"],
                (row["name"], int(row["spans"])), "",
            )


_LIBRARY_RATES_SQL = """
SELECT service_id, kind, name, sum(spans), sum(spans) FILTER (WHERE bucket_start >= %s),
       max(spans)
  FROM (SELECT b.service_id, b.kind, b.name, b.bucket_start, sum(b.spans) AS spans
          FROM runtime_librarybucket b
          JOIN runtime_service s ON s.id = b.service_id
          JOIN runtime_environment e ON e.id = s.environment_id
         WHERE e.team_id = %s AND b.bucket_start >= %s AND b.kind <> 'origin'
         -- Versions of one scope name are one piece of evidence: the busiest bucket is
         -- the busiest of their sum.
         GROUP BY b.service_id, b.kind, b.name, b.bucket_start) per_bucket
 GROUP BY service_id, kind, name
 ORDER BY service_id, kind, name
"""


def sbom_packages_by_service(
    deployments: Sequence[ri.Deployment], components: Sequence[ri.Component],
) -> dict[tuple[str, str], dict[str, tuple[str, ...]]]:
    """Per (environment, service): package prefix -> component keys, from the components
    of the service's deployed SBOMs that list their packages."""
    by_version: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for c in components:
        for package in c.packages:
            by_version[c.project_version][package].append(c.key)
    out: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
    for d in deployments:
        packages = by_version.get(d.project_version)
        if packages:
            table = out.setdefault((d.environment, d.service), {})
            for package, keys in packages.items():
                table[package] = tuple(sorted(set(table.get(package, ())) | set(keys)))
    return out


def _libraries(
    team_id: int, since: datetime, minutes: float, names: dict[int, tuple[str, str]],
    rank_settings_: ri.RankSettings, rates: _Rates,
    sbom_packages: dict[tuple[str, str], dict[str, tuple[str, ...]]] | None = None,
) -> list[ri.ServiceLibraries]:
    rules = library_map(rank_settings_.library_map)
    sbom_packages = sbom_packages or {}
    evidence: dict[int, list[Evidence]] = defaultdict(list)
    with connection.cursor() as cur:
        cur.execute(_LIBRARY_RATES_SQL, [rates.recent_since, team_id, since])
        rows = cur.fetchall()
    # Ordered by the SQL: rates are summed per component in this order, so the same
    # evidence always gives the same floats.
    for service_id, kind, name, spans, recent, peak in rows:
        evidence[service_id].append(
            (kind, name, int(spans) / minutes, rates.recent(recent), rates.peak(peak))
        )
    traced = set(
        Service.objects.filter(
            environment__team_id=team_id, kind=NodeKind.SERVICE, last_seen__gte=since
        ).values_list("pk", flat=True)
    )
    out = []
    for pk in sorted(traced | set(evidence)):
        if pk not in names:
            continue
        env, name = names[pk]
        out.append(
            ri.ServiceLibraries(
                environment=env,
                service=name,
                traced=pk in traced,
                observed=observed_components(evidence=evidence.get(pk, []), rules=rules,
                                             sbom=sbom_packages.get((env, name))),
            )
        )
    return out


# How each deployment source reads in explanations (runtime.models.DeploymentSource).
DEPLOYMENT_SOURCE_WORDS: dict[str, str] = {
    DeploymentSource.SBOM: "sbom upload",
    DeploymentSource.API: "API",
    DeploymentSource.TELEMETRY: "telemetry",
    DeploymentSource.MANUAL: "page",
}


def _deployments(team_id: int) -> tuple[list[ri.Deployment], set[int]]:
    deployments_from_telemetry(team_id=team_id)
    out = []
    versions: set[int] = set()
    for env, service, pv_id, impact, source, project, version in Deployment.objects.filter(
        environment__team_id=team_id
    ).values_list("environment__name", "service_name", "project_version_id", "human_impact",
                  "source", "project_version__project__name", "project_version__version"):
        out.append(
            ri.Deployment(
                environment=env, service=service, project_version=str(pv_id),
                human_impact=cast(ri.HumanImpact, impact),
                source=DEPLOYMENT_SOURCE_WORDS.get(source, source),
                project_version_name=f"{project}@{version}" if version else project,
            )
        )
        versions.add(pv_id)
    return out, versions


def _components(version_ids: set[int]) -> tuple[list[ri.ProjectVersion], list[ri.Component]]:
    """Code provenance of the deployed versions' current SBOMs."""
    from trustrank.inventory.models import ProjectVersion

    pvs = ProjectVersion.objects.filter(pk__in=version_ids).values_list("pk", "current_sbom_id")
    sbom_to_pv = {sbom: pv for pv, sbom in pvs if sbom is not None}
    out: dict[tuple[str, str], ri.Component] = {}
    rows = Component.objects.filter(sbom_id__in=list(sbom_to_pv)).values_list(
        "sbom_id", "purl", "name", "hashes", "supplier", "packages"
    )
    for sbom_id, purl, name, hashes, supplier, packages in rows.iterator(chunk_size=CHUNK):
        pv = str(sbom_to_pv[sbom_id])
        key = component_key_from_purl(purl) if purl else name
        out[(pv, key)] = ri.Component(
            project_version=pv, key=key, hashes_present=bool(hashes),
            supplier_known=bool(supplier), packages=tuple(packages or ()),
        )
    versions = [ri.ProjectVersion(key=str(pv)) for pv in sorted(version_ids)]
    return versions, list(out.values())


def _vectors(advisory_ids: set[str]) -> dict[str, str]:
    """Advisory id -> its CVSS vector (v4 preferred, then v3)."""
    out: dict[str, str] = {}
    ids = sorted(advisory_ids)
    for i in range(0, len(ids), 5000):
        for aid, severity in Advisory.objects.filter(id__in=ids[i : i + 5000]).values_list(
            "id", "severity"
        ):
            best = ""
            for s in severity or []:
                vector = str(s.get("vector") or s.get("score") or "")
                if vector.startswith("CVSS:4") or (vector.startswith("CVSS:3") and not best):
                    best = vector
            if best:
                out[aid] = best
    return out


_FINDINGS_SQL = """
SELECT f.id, f.kind, f.vuln_id, f.severity, f.cvss_score, f.in_kev, f.kev_date_added, f.epss,
       f.epss_percentile, f.cve_id, f.advisory_id, f.project_version_id, f.component_purl,
       -- Columns only some rows read are sent only for those rows: a million findings
       -- fetched at once hold every value in memory.
       CASE WHEN COALESCE(f.component_purl, '') = '' THEN f.component_key END,
       CASE WHEN COALESCE(f.component_purl, '') = '' THEN f.component_name END,
       {other},
       f.baseline_priority,
       {subject},
       f.state IN ('in_triage', 'exploitable'),
       {settled}
  FROM findings_finding f
  {joins}
  {due_join}
 WHERE f.team_id = %s AND {where}
 ORDER BY f.id
"""

# What only identity and reliability findings read: their category, environment, the
# service they are about and a short subject.
_OTHER_COLUMNS = (
    "CASE WHEN f.kind <> 'vulnerability' THEN f.category END, "
    "CASE WHEN f.kind <> 'vulnerability' THEN f.environment END, "
    "CASE WHEN f.kind <> 'vulnerability' THEN COALESCE(s.name, NULLIF(i.service_name, '')) "
    "END"
)
_OTHER_SUBJECT = "CASE WHEN f.kind <> 'vulnerability' THEN left(f.fingerprint, 16) END"
_OTHER_JOINS = (
    "LEFT JOIN runtime_service s ON s.id = f.service_id "
    # An identity finding is about the service its SPIFFE ID is mapped to.
    "LEFT JOIN identity_identity i ON i.id = f.identity_id"
)


def _findings_statements(where: str, settled: str, due_join: str, *, split: bool) -> list[str]:
    """The findings read: one statement, or (`split`) one for vulnerabilities, which need
    neither the joins nor the other kinds' columns (a million rows: the joins alone were
    a second of PostgreSQL's time), and one for the other kinds."""
    if not split:
        return [_FINDINGS_SQL.format(other=_OTHER_COLUMNS, subject=_OTHER_SUBJECT,
                                     joins=_OTHER_JOINS, due_join=due_join, settled=settled,
                                     where=where)]
    return [
        _FINDINGS_SQL.format(other="NULL, NULL, NULL", subject="NULL", joins="",
                             due_join=due_join, settled=settled,
                             where=f"f.kind = 'vulnerability' AND {where}"),
        _FINDINGS_SQL.format(other=_OTHER_COLUMNS, subject=_OTHER_SUBJECT,
                             joins=_OTHER_JOINS, due_join=due_join, settled=settled,
                             where=f"f.kind <> 'vulnerability' AND {where}"),
    ]


def _findings(
    team_id: int, *, changed_since: datetime | None = None,
    settled: dict[int, str] | None = None, policy: PolicyDays | None = None,
    unsettled_rows: set[int] | None = None,
) -> tuple[list[ri.Finding], dict[str, int], set[str]]:
    """(open findings, their database ids, ids that left the open states). With
    `changed_since`, only findings written since then (an incremental run's delta). With
    `settled` and `policy`, `settled` receives each open finding's decision whose due date
    is settled under `policy` (`settled_decision_sql`), and `unsettled_rows` the open
    findings whose due-date row is settled for none."""
    # Raw rows, not the ORM: a million findings is the design point, and building model
    # rows (or even values_list tuples) costs several times the fetch itself.
    assert set(OPEN_STATES) == {"in_triage", "exploitable"}
    params: list[Any]
    settled_sql, settled_params = (
        settled_decision_sql(policy) if settled is not None and policy is not None
        else ("NULL", [])
    )
    due_join = (
        "LEFT JOIN findings_findingdue d ON d.finding_id = f.id" if settled_params else ""
    )
    if changed_since is None:
        statements = _findings_statements("f.state IN ('in_triage', 'exploitable')",
                                          settled_sql, due_join, split=True)
        params = [*settled_params, team_id]
    else:
        statements = _findings_statements("f.updated_at >= %s", settled_sql, due_join,
                                          split=False)
        params = [*settled_params, team_id, changed_since]
    note_settled = settled.__setitem__ if settled is not None else None
    findings: list[ri.Finding] = []
    ids: dict[str, int] = {}
    closed: set[str] = set()
    keys: dict[str, str] = {}
    vectors: dict[str, str] = {}
    advisories_seen: set[str] = set()
    epss_dates: dict[str, Any] = {}
    cves_seen: set[str] = set()
    # One object per distinct value for the strings findings repeat (the driver makes a
    # new one per row): the inputs stay in memory for the run and the next.
    shared: dict[Any, Any] = {}
    share = shared.setdefault
    versions: dict[Any, str] = {}
    vuln = ri.Finding
    append = findings.append
    # A server-side cursor read in chunks: the driver never holds a million rows at once
    # (the memory it frees would stay with the process, outside Python's own arenas).
    def chunks() -> Iterator[list[tuple[Any, ...]]]:
        for sql in statements:
            with connection.chunked_cursor() as cur:
                cur.execute(sql, params)
                yield from _prefetched(cur.fetchmany)

    with transaction.atomic():
        for chunk in chunks():
            if _vulnerabilities_only(chunk):
                _add_vulnerabilities(
                    chunk, findings, ids, keys=keys, versions=versions, vectors=vectors,
                    epss_dates=epss_dates, share=share, settled=note_settled,
                    unsettled_rows=unsettled_rows, advisories_seen=advisories_seen,
                    cves_seen=cves_seen,
                )
                continue
            closed.update(str(r[0]) for r in chunk if not r[20])
            _lookups(
                {r[10] for r in chunk}, {r[9] for r in chunk}, vectors=vectors,
                epss_dates=epss_dates, advisories_seen=advisories_seen, cves_seen=cves_seen,
            )
            for (pk, kind, vuln_id, severity, cvss, in_kev, kev_date, epss, pct, cve,
                 advisory_id, pv_id, purl, ckey, cname, category, env, service, baseline,
                 subject, is_open, settled_decision) in chunk:
                if not is_open:
                    continue
                fid = str(pk)
                ids[fid] = pk
                if settled_decision is not None and note_settled is not None:
                    if settled_decision:
                        note_settled(pk, share(settled_decision, settled_decision))
                    elif unsettled_rows is not None:
                        unsettled_rows.add(pk)
                if kind == "vulnerability":
                    key = keys.get(purl) if purl else None
                    if key is None:
                        key = component_key_from_purl(purl) if purl else (cname or ckey)
                        if purl:
                            keys[purl] = key
                    pv = versions.get(pv_id)
                    if pv is None:
                        pv = versions[pv_id] = str(pv_id or "")
                    # Positional, in the field order of trustrank.risk.inputs.Finding: a
                    # million keyword calls cost a second.
                    append(
                        vuln(
                            fid, "vulnerability", "", share(vuln_id, vuln_id),
                            share(severity, severity), cvss,
                            vectors.get(advisory_id or "", ""), in_kev,
                            share(kev_date, kev_date), epss, pct, epss_dates.get(cve), pv, key,
                            "", "", float(baseline or 0.0), "",
                        )
                    )
                else:
                    append(
                        ri.Finding(
                            id=fid, kind=cast(ri.FindingKind, kind), sub_kind=category,
                            severity=severity, environment=env, service=service or "",
                            baseline=float(baseline or 0.0), subject=subject,
                        )
                    )
    return findings, ids, closed


def _prefetched(
    fetch: Callable[[int], list[tuple[Any, ...]]],
) -> Iterator[list[tuple[Any, ...]]]:
    """`fetch(CHUNK)`'s chunks until an empty one, fetched by a thread one chunk ahead:
    PostgreSQL reads the next chunk (seconds of its time over a million findings) while
    this thread turns the last one into records, instead of each waiting for the other.
    The connection is psycopg's, which serialises its users; the caller issues no other
    statement on it while this runs, save the few lookups between chunks."""
    chunks: queue.Queue[list[tuple[Any, ...]] | BaseException | None] = queue.Queue(2)
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set() and (chunk := fetch(CHUNK)):
                chunks.put(chunk)
            chunks.put(None)
        except BaseException as exc:  # re-raised below, in the caller's thread
            chunks.put(exc)

    thread = threading.Thread(target=run, name="findings-read", daemon=True)
    thread.start()
    try:
        while (item := chunks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # Abandoned early (an error while a chunk was turned into records): the thread
        # stops after its current fetch, before the cursor is closed under it.
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                chunks.get(timeout=0.1)
        thread.join()

def _lookups(
    advisory_ids: set[str | None], cve_ids: set[str | None], *, vectors: dict[str, str],
    epss_dates: dict[str, Any], advisories_seen: set[str], cves_seen: set[str],
) -> None:
    """The CVSS vectors and EPSS dates of the advisories and CVEs not looked up yet."""
    advisories = {a for a in advisory_ids if a} - advisories_seen
    if advisories:
        vectors.update(_vectors(advisories))
        advisories_seen |= advisories
    cves = sorted({c for c in cve_ids if c} - cves_seen)
    if cves:
        cves_seen.update(cves)
        for i in range(0, len(cves), 5000):
            epss_dates.update(
                EpssLatest.objects.filter(cve_id__in=cves[i : i + 5000]).values_list(
                    "cve_id", "score_date"
                )
            )


def _vulnerabilities_only(chunk: list[tuple[Any, ...]]) -> bool:
    """Whether every row of a findings chunk is an open vulnerability with a purl and a
    non-zero baseline: such a chunk is turned into records column by column."""
    kinds, purls, baselines, open_ = (
        list(map(itemgetter(i), chunk)) for i in (1, 12, 18, 20))
    return (kinds.count("vulnerability") == len(chunk) and all(purls) and all(baselines)
            and all(open_))


def _add_vulnerabilities(
    chunk: list[tuple[Any, ...]], findings: list[ri.Finding], ids: dict[str, int], *,
    keys: dict[str, str], versions: dict[Any, str], vectors: dict[str, str],
    epss_dates: dict[str, Any], share: Callable[[Any, Any], Any],
    settled: Callable[[int, str], None] | None, unsettled_rows: set[int] | None,
    advisories_seen: set[str], cves_seen: set[str],
) -> None:
    """A chunk of open vulnerabilities (`_vulnerabilities_only`) as records, column by
    column: the same records, ids and settled decisions as `_findings`' loop gives row by
    row, each column a pass in C (a million rows through a Python loop cost seconds)."""
    (pks, _kind, vuln_ids, severities, cvss, in_kev, kev_dates, epss, pct, cves, advisories,
     pv_ids, purls, _ckey, _cname, _category, _env, _service, baselines, _subject, _open,
     decisions) = zip(*chunk, strict=True)
    n = len(chunk)
    _lookups(set(advisories), set(cves), vectors=vectors, epss_dates=epss_dates,
             advisories_seen=advisories_seen, cves_seen=cves_seen)
    fids = list(map(str, pks))
    ids.update(zip(fids, pks, strict=True))
    if settled is not None and decisions.count(None) != n:
        for pk, decision in zip(pks, decisions, strict=True):
            if decision:
                settled(pk, share(decision, decision))
            elif decision is not None and unsettled_rows is not None:
                unsettled_rows.add(pk)
    for purl in set(purls) - keys.keys():
        keys[purl] = component_key_from_purl(purl)
    for pv_id in set(pv_ids) - versions.keys():
        versions[pv_id] = str(pv_id or "")
    findings.extend(ri.findings_from_columns(n, {
        "id": fids, "kind": repeat("vulnerability"), "sub_kind": repeat(""),
        "vuln_id": map(share, vuln_ids, vuln_ids),
        "severity": map(share, severities, severities), "cvss_score": cvss,
        "cvss_vector": map(vectors.get, advisories, repeat("")), "in_kev": in_kev,
        "kev_date": map(share, kev_dates, kev_dates), "epss": epss, "epss_percentile": pct,
        "epss_date": map(epss_dates.get, cves), "project_version": map(versions.__getitem__,
                                                                       pv_ids),
        "component_key": map(keys.__getitem__, purls), "environment": repeat(""),
        "service": repeat(""), "baseline": map(float, baselines), "subject": repeat(""),
    }))


def ranking_inputs_gather(
    *, team_id: int, previous: Gathered | None = None, changed_since: datetime | None = None,
) -> Gathered:
    """The team's inputs. With `previous` and `changed_since`, findings are the previous
    ones updated by what was written since; the graph evidence is always read anew, and
    when its rows equal the previous gather's, the previous graph records are reused
    (`GraphRead`)."""
    since, minutes = _window()
    rates = _Rates.for_window(since, minutes)
    rs = rank_settings()
    graph = _graph(team_id, since, minutes, rates,
                   previous.graph if previous is not None else None)
    deployments, version_ids = _deployments(team_id)
    versions, components = _components(version_ids)
    libraries = _libraries(team_id, since, minutes, graph.names, rs, rates,
                           sbom_packages_by_service(deployments, components))
    if previous is not None and changed_since is not None:
        delta, delta_ids, closed = _findings(
            team_id, changed_since=changed_since,
        )
        # The previous records less those read again or closed, then the ones read: one
        # set lookup per finding rather than a dictionary of a million.
        touched = {f.id for f in delta} | closed
        findings: Sequence[ri.Finding]
        if touched:
            findings = [f for f in previous.inputs.findings if f.id not in touched]
            findings.extend(delta)
            ids = dict(previous.finding_ids)
            for fid in closed:
                ids.pop(fid, None)
            ids.update(delta_ids)
        else:
            # No finding written since: the previous records and ids as they are (neither
            # is changed after a gather), not a copy of a million of each.
            findings, ids = previous.inputs.findings, previous.finding_ids
        settled: dict[int, str] | None = None
        policy: PolicyDays | None = None
        unsettled_rows: set[int] | None = None
    else:
        touched = None
        delta = None
        policy = triage_policy_for(team_id=team_id)
        settled, unsettled_rows = {}, set()
        findings, ids, _closed = _findings(team_id, settled=settled, policy=policy,
                                           unsettled_rows=unsettled_rows)
    inputs = ri.RankInputs(
        services=graph.services, edges=graph.edges, peers=graph.peers,
        origins=graph.origins, deployments=tuple(deployments),
        project_versions=tuple(versions), components=tuple(components),
        libraries=tuple(libraries), findings=tuple(findings),
    )
    return Gathered(inputs=inputs, finding_ids=ids, window_minutes=minutes, settled=settled,
                    policy=policy,
                    unsettled_rows=None if unsettled_rows is None
                    else frozenset(unsettled_rows),
                    touched=None if touched is None else frozenset(touched),
                    delta=None if delta is None else tuple(delta), graph=graph)
