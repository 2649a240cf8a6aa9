"""Reads for runtime evidence. Every entry point filters by the principal's teams."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES, FindingKind
from trustrank.findings.evidence import BROKEN_CONTEXT
from trustrank.findings.models import Finding
from trustrank.lib.numbers import int_or_none
from trustrank.runtime import engine_histograms
from trustrank.runtime.map_edges import busiest_edges
from trustrank.runtime.models import (
    CallEdgeBucket,
    Deployment,
    Environment,
    LibraryBucket,
    NodeKind,
    Service,
    TraceSample,
)

# The findings list's contextual order: the ranked in their team's queue order (the queue key,
# the finding breaking ties, as the ranking engine orders them; the stored rank is the one of
# the run that last wrote the row), then the unranked by baseline priority.
QUEUE_ORDER = (
    F("ranked__qkey").asc(nulls_last=True), F("ranked__finding_id").asc(nulls_last=True),
    F("baseline_priority").desc(), F("id").desc(),
)



def window_since(window: timedelta | None) -> datetime | None:
    return None if window is None else timezone.now() - window


def environments_for_principal(*, principal: Principal) -> QuerySet[Environment]:
    return (
        Environment.objects.filter(team_id__in=principal.team_ids)
        .select_related("team")
        .annotate(service_count=Count("services", filter=Q(services__kind=NodeKind.SERVICE)))
        .order_by("name", "team__name")
    )


def environments_by_name(*, principal: Principal, name: str) -> list[Environment]:
    """The principal's environments called `name` (one per team it can see); failing that,
    the one whose id `name` spells (a name always wins: an environment may be called "7").
    404 if none."""
    mine = Environment.objects.filter(team_id__in=principal.team_ids).select_related("team")
    envs = list(mine.filter(name=name))
    number = int_or_none(name, minimum=1)
    if not envs and number is not None:
        envs = list(mine.filter(pk=number))
    if not envs:
        raise Http404(f"no environment named {name!r}")
    return envs


def environment_get_for_user(*, principal: Principal, pk: Any) -> Environment:
    env = (
        Environment.objects.filter(team_id__in=principal.team_ids, pk=pk)
        .select_related("team")
        .first()
    )
    if env is None:
        raise Http404("no such environment")
    return env


def services_for_environments(*, environments: Iterable[Environment]) -> QuerySet[Service]:
    return (
        Service.objects.filter(environment__in=list(environments))
        .exclude(kind=NodeKind.INTERNET)
        .select_related("environment", "environment__team")
        .order_by("kind", "namespace", "name", "id")
    )


def service_get_for_user(*, principal: Principal, pk: Any) -> Service:
    service = (
        Service.objects.filter(environment__team_id__in=principal.team_ids, pk=pk)
        .select_related("environment", "environment__team")
        .first()
    )
    if service is None:
        raise Http404("no such service")
    return service


def _buckets(since: datetime | None) -> QuerySet[CallEdgeBucket]:
    qs = CallEdgeBucket.objects.all()
    if since is not None:
        qs = qs.filter(bucket_start__gte=since)
    return qs


@dataclass
class ServiceRates:
    calls_in: int = 0
    errors_in: int = 0
    calls_out: int = 0
    errors_out: int = 0


def service_rates(*, service_ids: list[int], since: datetime | None) -> dict[int, ServiceRates]:
    rates: dict[int, ServiceRates] = defaultdict(ServiceRates)
    buckets = _buckets(since)
    for row in (
        buckets.filter(callee_id__in=service_ids)
        .values("callee_id")
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
    ):
        rates[row["callee_id"]].calls_in = row["calls"]
        rates[row["callee_id"]].errors_in = row["errors"]
    for out_row in (
        buckets.filter(caller_id__in=service_ids)
        .values("caller_id")
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
    ):
        rates[out_row["caller_id"]].calls_out = out_row["calls"]
        rates[out_row["caller_id"]].errors_out = out_row["errors"]
    return rates


def service_libraries(
    *, service_ids: list[int], since: datetime | None
) -> dict[int, list[dict[str, Any]]]:
    qs = LibraryBucket.objects.filter(service_id__in=service_ids).exclude(kind="origin")
    if since is not None:
        qs = qs.filter(bucket_start__gte=since)
    result: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in (
        qs.values("service_id", "kind", "name", "version")
        .annotate(spans=Sum("spans"), last_bucket=Max("bucket_start"))
        .order_by("service_id", "kind", "-spans", "name")
    ):
        result[row["service_id"]].append(
            {
                "kind": row["kind"],
                "name": row["name"],
                "version": row["version"],
                "spans": row["spans"],
                "last_seen": row["last_bucket"],
            }
        )
    return result


@dataclass
class EdgeSummary:
    caller: Service
    callee: Service
    calls: int
    errors: int
    tls_calls: int
    mtls_calls: int
    last_seen: datetime
    percentiles_ms: dict[str, float | None] = field(default_factory=dict)

    @property
    def error_ratio(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


def edges_aggregate(
    *, edge_filter: Q, since: datetime | None
) -> QuerySet[Any, Any]:
    """One row per (caller, callee) over the window, busiest first; paginate this."""
    return (
        _buckets(since)
        .filter(edge_filter)
        .values("caller_id", "callee_id")
        .annotate(
            calls=Sum("calls"),
            errors=Sum("errors"),
            tls_calls=Sum("tls_calls"),
            mtls_calls=Sum("mtls_calls"),
            last_seen=Max("last_seen"),
        )
        .order_by("-calls", "caller_id", "callee_id")
    )


def edges_summarize(
    *, rows: Iterable[dict[str, Any]], since: datetime | None
) -> list[EdgeSummary]:
    """Rows from edges_aggregate -> summaries with their nodes and p50/p95/p99 (the
    histograms of every bucket in the window, merged)."""
    rows = list(rows)
    if not rows:
        return []
    pairs = {(r["caller_id"], r["callee_id"]) for r in rows}
    node_ids = {i for pair in pairs for i in pair}
    nodes = Service.objects.in_bulk(list(node_ids))
    hists: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
    pair_filter = Q()
    for caller_id, callee_id in pairs:
        pair_filter |= Q(caller_id=caller_id, callee_id=callee_id)
    for caller_id, callee_id, hist in (
        _buckets(since).filter(pair_filter).values_list("caller_id", "callee_id", "hist")
    ):
        hists[(caller_id, callee_id)].append(hist)
    result = []
    for row in rows:
        merged = engine_histograms.hist_merge(hists[(row["caller_id"], row["callee_id"])])
        pct = engine_histograms.hist_percentiles(merged)
        result.append(
            EdgeSummary(
                caller=nodes[row["caller_id"]],
                callee=nodes[row["callee_id"]],
                calls=row["calls"],
                errors=row["errors"],
                tls_calls=row["tls_calls"],
                mtls_calls=row["mtls_calls"],
                last_seen=row["last_seen"],
                percentiles_ms={"p50": pct[0.5], "p95": pct[0.95], "p99": pct[0.99]},
            )
        )
    return result


def service_edges(
    *, service: Service, since: datetime | None
) -> tuple[list[EdgeSummary], list[EdgeSummary]]:
    """(callers, callees) of a service over the window."""
    callers = edges_summarize(
        rows=edges_aggregate(edge_filter=Q(callee_id=service.pk), since=since), since=since
    )
    callees = edges_summarize(
        rows=edges_aggregate(edge_filter=Q(caller_id=service.pk), since=since), since=since
    )
    return callers, callees


def _broken_context(*, team_id: int, environment: str) -> QuerySet[Finding]:
    return Finding.objects.filter(
        team_id=team_id,
        kind=FindingKind.RELIABILITY,
        category=BROKEN_CONTEXT,
        environment=environment,
    ).order_by("-last_seen", "-pk")


def broken_context_for_service(*, service: Service) -> QuerySet[Finding]:
    """Lost-context findings on hops into or out of this service."""
    env = service.environment
    return _broken_context(team_id=env.team_id, environment=env.name).filter(
        Q(service=service)
        | Q(evidence__caller=service.name, evidence__caller_namespace=service.namespace)
    )


def broken_context_for_environment(*, environment: Environment) -> QuerySet[Finding]:
    return _broken_context(team_id=environment.team_id, environment=environment.name)


def findings_for_service(*, service: Service) -> QuerySet[Finding]:
    """The open findings of every kind about this service: those that name it (identity,
    reliability) and the vulnerabilities of the project versions it runs. A vulnerability
    finding names no service: it belongs to a project version, and a deployment says which
    service runs that version, keyed by environment and service name as the ranking engine
    reads it. In the findings list's contextual order (the latest run's rank, the unranked
    after by baseline priority); a service's findings are few, so a page finds them first
    and sorts them (paging.SortedMatches) rather than walk the team's rank index."""
    versions = list(
        Deployment.objects.filter(
            environment_id=service.environment_id, service_name=service.name
        ).values_list("project_version_id", flat=True)
    )
    return (
        Finding.objects.filter(
            Q(service=service) | Q(project_version_id__in=versions),
            team_id=service.environment.team_id,
            state__in=OPEN_STATES,
        )
        .select_related("project", "project_version", "ranked__context")
        .order_by(*QUEUE_ORDER)
    )


def trace_samples_for_service(*, service: Service, limit: int = 20) -> list[TraceSample]:
    return list(
        TraceSample.objects.filter(
            environment_id=service.environment_id, spans__contains=[{"service": service.name}]
        ).order_by("-received_at")[:limit]
    )


def trace_spans(*, environment: Environment, trace_id: str) -> list[dict[str, Any]]:
    """All sampled spans of one trace, every service's part, in start order."""
    spans: list[dict[str, Any]] = []
    for sample in TraceSample.objects.filter(environment=environment, trace_id=trace_id.lower()):
        spans.extend(sample.spans)
    spans.sort(key=lambda s: (s.get("start_ns", 0), s.get("span_id", "")))
    return spans


# What the service map draws: the busiest calls, and besides their ends at most this many of
# the environment's other services (those no drawn call reaches, in name order). At 100,000
# services a map of every one was 10 MB of JSON no browser lays out, and 5.3 s of the page
# making it (bench/pages.py); the services table below the map lists every one.
GRAPH_MAX_EDGES = 2000
GRAPH_MAX_OTHER_NODES = 500
# The columns a node reads (`display_name`, `is_ingress`): not the JSON attributes.
_NODE_FIELDS = ("id", "kind", "namespace", "name", "ingress_candidate", "ingress_override")


def graph_for_environment(*, environment: Environment, since: datetime | None) -> dict[str, Any]:
    """Nodes and edges (with calls per minute) for the service map: the `GRAPH_MAX_EDGES`
    busiest calls, their ends, and up to `GRAPH_MAX_OTHER_NODES` other services;
    `services_total` counts the environment's services, `services_drawn` those drawn."""
    rows = busiest_edges(
        environment=environment, since=since, limit=GRAPH_MAX_EDGES,
        compute=lambda start: list(edges_aggregate(
            edge_filter=Q(environment=environment), since=start)[:GRAPH_MAX_EDGES]),
    )
    node_ids = {r["caller_id"] for r in rows} | {r["callee_id"] for r in rows}
    services = Service.objects.filter(environment=environment, kind=NodeKind.SERVICE)
    # One statement: the calls' ends, and the first others by name (one more than drawn, to
    # know whether any is left out).
    others = (services.exclude(pk__in=node_ids).only(*_NODE_FIELDS)
              .order_by("namespace", "name")[:GRAPH_MAX_OTHER_NODES + 1])
    found = list(Service.objects.filter(pk__in=node_ids).only(*_NODE_FIELDS).order_by()
                 .union(others, all=True))
    ends = [n for n in found if n.pk in node_ids]
    other = sorted((n for n in found if n.pk not in node_ids),
                   key=lambda n: (n.namespace, n.name))
    nodes = sorted([*ends, *other[:GRAPH_MAX_OTHER_NODES]],
                   key=lambda n: (n.kind, n.namespace, n.name))
    drawn = sum(1 for n in nodes if n.kind == NodeKind.SERVICE)
    minutes = None if since is None else max((timezone.now() - since).total_seconds() / 60, 1)
    return {
        # Counted only when some are left out; else every service is drawn.
        "services_total": (services.count() if len(other) > GRAPH_MAX_OTHER_NODES
                           else drawn),
        "services_drawn": drawn,
        "nodes": [
            {
                "id": str(node.pk),
                "name": node.name,
                "label": node.display_name,
                "kind": node.kind,
                "ingress": node.is_ingress,
                "url": f"/services/{node.pk}/" if node.kind != NodeKind.INTERNET else "",
            }
            for node in nodes
        ],
        "edges": [
            {
                "id": f"{r['caller_id']}-{r['callee_id']}",
                "source": str(r["caller_id"]),
                "target": str(r["callee_id"]),
                "calls": r["calls"],
                "errors": r["errors"],
                "per_minute": round(r["calls"] / minutes, 2) if minutes else None,
                "tls": bool(r["tls_calls"]),
            }
            for r in rows
        ],
    }


@dataclass(frozen=True)
class ObservedCall:
    """Calls between two traced services over a window, as plain data for other domains."""

    caller: str
    caller_namespace: str
    callee: str
    callee_namespace: str
    calls: int
    mtls_calls: int


def observed_calls(*, team_id: int, environment: str, since: datetime) -> list[ObservedCall]:
    """Service-to-service calls seen since `since` in one team's environment (system use:
    the caller has already established which team it acts for)."""
    rows = (
        CallEdgeBucket.objects.filter(
            environment__team_id=team_id,
            environment__name=environment,
            bucket_start__gte=since,
            caller__kind=NodeKind.SERVICE,
            callee__kind=NodeKind.SERVICE,
        )
        .values("caller__name", "caller__namespace", "callee__name", "callee__namespace")
        .annotate(calls=Sum("calls"), mtls_calls=Sum("mtls_calls"))
        .order_by("caller__name", "callee__name")
    )
    return [
        ObservedCall(
            caller=row["caller__name"],
            caller_namespace=row["caller__namespace"],
            callee=row["callee__name"],
            callee_namespace=row["callee__namespace"],
            calls=row["calls"] or 0,
            mtls_calls=row["mtls_calls"] or 0,
        )
        for row in rows
    ]


def deployment_for_service(*, service: Service) -> Deployment | None:
    """The project version this service runs, as recorded (None when nobody said)."""
    return (
        Deployment.objects.filter(
            environment_id=service.environment_id,
            namespace=service.namespace,
            service_name=service.name,
        )
        .select_related("project_version__project")
        .first()
    )


def deployments_for_services(*, services: Iterable[Service]) -> dict[int, Deployment]:
    """Service id -> its recorded deployment, for a page of services (one query)."""
    services = list(services)
    if not services:
        return {}
    wanted = {(s.environment_id, s.namespace, s.name): s.pk for s in services}
    rows = Deployment.objects.filter(
        environment_id__in={s.environment_id for s in services},
        service_name__in={s.name for s in services},
    ).select_related("project_version__project")
    out: dict[int, Deployment] = {}
    for d in rows:
        pk = wanted.get((d.environment_id, d.namespace, d.service_name))
        if pk is not None:
            out[pk] = d
    return out
