"""The graph part of the inputs: services (with their attested identity and ingress
evidence), call edges aggregated over the window, external peers and root-span origins."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Sum

from trustrank.cluster.selectors import entry_points_read, routes_for
from trustrank.identity.models import Identity
from trustrank.ranking.entry_points import declared_rows, declared_services
from trustrank.ranking.inputs.edges import EdgeWindow, edges_read
from trustrank.risk import inputs as ri
from trustrank.runtime.models import LibraryBucket, NodeKind
from trustrank.runtime.revisions import TeamRevision
from trustrank.runtime.services.ingress import ingress_override_text

# The explanations' "recent" rate: calls in the last hour of the window.
RECENT_MINUTES = 60


@dataclass(frozen=True)
class Rates:
    """How per-bucket counts become the explanations' recent and peak rates. Only with
    buckets of at most a minute (the trace aggregation's default) and a window of at least
    an hour; otherwise explanations give the window's average alone."""

    recent_since: datetime
    bucket_minutes: float
    enabled: bool

    @classmethod
    def for_window(cls, since: datetime, minutes: float) -> Rates:
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
"""


@dataclass(frozen=True)
class GraphRead:
    """The graph part of a gather: what was read (`key`, and the edge sums `window`) and
    the records made of it. A next gather that reads equal rows and sums reuses these very
    records, so the engine knows without hashing them that the graph did not change."""

    key: tuple[Any, ...]
    services: tuple[ri.Service, ...]
    edges: tuple[ri.CallEdge, ...]
    peers: tuple[ri.ExternalPeer, ...]
    origins: tuple[ri.RootSpanOrigin, ...]
    names: dict[int, tuple[str, str]]
    window: EdgeWindow
    # The services' rows in the order PostgreSQL sent them: read again in that same order,
    # they are the rows sorted before (`key`), and need no sort.
    fetched: list[tuple[Any, ...]] | None = None
    # The team's revision read just before them (`runtime.revisions`): a next gather whose
    # revision of the services' tables is this one does not read them again.
    revision: TeamRevision | None = None


def graph_read(
    team_id: int, since: datetime, minutes: float, rates: Rates,
    previous: GraphRead | None = None, revision: TeamRevision | None = None,
) -> GraphRead:
    identities = _identities(team_id)
    # The services and the declared ones are not read again while the team's services,
    # their environments and deployments keep their revision: the services statement was
    # 91 ms of PostgreSQL and its rows 0.1 s of Python per run at 100,000 services.
    # Otherwise raw SQL: only one attribute is read, so the rest of each service's
    # attributes is neither sent nor decoded (the ORM parsed ten thousand JSON documents
    # per run).
    if (previous is not None and previous.fetched is not None and revision is not None
            and previous.revision is not None and previous.revision.graph == revision.graph):
        fetched, declared = previous.fetched, previous.key[1]
    else:
        with connection.cursor() as cur:
            cur.execute(_SERVICES_SQL, [team_id])
            fetched = cur.fetchall()
        declared = declared_rows(team_id)
    # In (kind, namespace, name) order, by code point: sorted here, not by PostgreSQL,
    # whose sort of 100,000 rows under the database's collation spilled to disk (0.3-0.5 s
    # of every run, against 0.05 s here); the previous gather's sorted rows when they came
    # as before (0.02 s a run at 100,000 services).
    if previous is not None and (previous.fetched is fetched or previous.fetched == fetched):
        rows = previous.key[0]
    else:
        rows = sorted(fetched, key=itemgetter(2, 3, 4))
    # The edge sums (raw SQL: fifty thousand aggregated edges through the ORM cost half a
    # second of converters per run), only those that changed when read before.
    window = edges_read(team_id, since, rates.recent_since,
                        previous.window if previous is not None else None)
    local = list(_local_origins(team_id, since))
    entries = entry_points_read(team_id)
    key = (rows, declared, identities, local, entries, minutes, rates.enabled,
           rates.bucket_minutes)
    if previous is not None and previous.key == key and (
            window.pairs is previous.window.pairs or window.pairs == previous.window.pairs):
        return replace(previous, window=window, fetched=fetched, revision=revision)
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
    for (caller, callee), (calls, errors, mtls, recent, peak) in window.pairs.items():
        if callee not in names or caller not in names:
            continue
        env, callee_name = names[callee]
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
        mtls_share = mtls / calls if calls else 0.0
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
                error_rate=round(errors / calls, 4) if calls else 0.0,
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
    return GraphRead(key, tuple(services), tuple(edges), tuple(peers), tuple(origins), names,
                     window, fetched, revision)


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
