"""Pure aggregation of OTLP spans into a service call graph. No ORM, no Django.

One pass over the parser's plain span rows (trustrank.parsers.otlp.SpanBatch: protobuf
types never reach this module) fills plain dicts keyed by (environment, node, time bucket);
the services layer turns them into bulk upserts. Spans are never turned into per-span
objects: at a hundred thousand spans a second, every access counts, so the hot loop unpacks
each row once into locals.

Node keys are tuples `(kind, namespace, name)` with kind `service`, `external` or `internet`.

Latency is kept as a histogram (`engine_histograms`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trustrank.parsers.otlp import ResourceSpans, sample_threshold
from trustrank.risk.addresses import classify_address
from trustrank.runtime.engine_histograms import HIST_BUCKETS

SERVICE = "service"
EXTERNAL = "external"
INTERNET = "internet"
INTERNET_NODE = (INTERNET, "", "internet")

# OTLP span kinds and status codes (opentelemetry.proto.trace.v1).
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = 1, 2, 3, 4, 5
STATUS_ERROR = 2

# A root server span counts as the callee side of a caller's client span (lost context)
# when it starts within this much of the client span; covers clock skew between hosts.
CLOCK_SKEW_NS = 1_000_000_000

NodeKey = tuple[str, str, str]

# Service attribute that keeps the last public client address of a root server span.
INGRESS_CLIENT_ATTRIBUTE = "trustrank.ingress.client"

# Resource attributes kept on the service (Kubernetes placement and the like).
RESOURCE_KEYS = (
    "service.namespace",
    "service.version",
    "service.instance.id",
    "k8s.namespace.name",
    "k8s.deployment.name",
    "k8s.statefulset.name",
    "k8s.daemonset.name",
    "k8s.cluster.name",
    "k8s.pod.name",
    "k8s.node.name",
    "container.image.name",
    "telemetry.sdk.language",
    "telemetry.sdk.name",
    "telemetry.sdk.version",
)


@dataclass
class ServiceInfo:
    version: str = ""
    attributes: dict[str, str] = field(default_factory=dict)
    first_ns: int = 0
    last_ns: int = 0


@dataclass
class EdgeStat:
    calls: int = 0
    errors: int = 0
    tls: int = 0
    mtls: int = 0
    last_ns: int = 0
    hist: dict[int, int] = field(default_factory=dict)

    def add(self, *, dur_ns: int, error: bool, tls: bool, mtls: bool, end_ns: int) -> None:
        self.add_call(dur_ns, error, tls, mtls, end_ns)

    def add_call(self, dur_ns: int, error: bool, tls: bool, mtls: bool, end_ns: int) -> None:
        """`add` for the aggregation's hot loop: positional, the histogram index inlined."""
        self.calls += 1
        if error:
            self.errors += 1
        if tls or mtls:
            self.tls += 1
        if mtls:
            self.mtls += 1
        if end_ns > self.last_ns:
            self.last_ns = end_ns
        us = dur_ns // 1000
        if us < 4:
            idx = us if us > 0 else 0
        else:
            bits = us.bit_length()
            idx = (bits - 2) * 4 + ((us >> (bits - 3)) & 3)
            if idx >= HIST_BUCKETS:
                idx = HIST_BUCKETS - 1
        hist = self.hist
        hist[idx] = hist.get(idx, 0) + 1


@dataclass(frozen=True)
class PendingServer:
    """A server/consumer span whose parent span is not in this request."""

    env: str
    service: NodeKey
    parent_span_id: int
    bucket: int
    dur_ns: int
    error: bool
    tls: bool
    mtls: bool
    end_ns: int
    trace_id: str


@dataclass(frozen=True)
class OpenClient:
    """A client/producer span whose callee span is not in this request (yet)."""

    env: str
    service: NodeKey
    span_id: int
    peer: str
    target: NodeKey | None
    bucket: int
    start_ns: int
    end_ns: int
    trace_id: str
    dur_ns: int
    error: bool
    tls: bool
    mtls: bool


@dataclass
class BrokenContext:
    count: int = 0
    first_ns: int = 0
    last_ns: int = 0
    examples: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Aggregate:
    """Everything one export request contributes, keyed for bulk upserts."""

    bucket_seconds: int
    spans: int = 0
    rejected: int = 0
    services: dict[tuple[str, NodeKey], ServiceInfo] = field(default_factory=dict)
    edges: dict[tuple[str, NodeKey, NodeKey, int], EdgeStat] = field(default_factory=dict)
    libraries: dict[tuple[str, NodeKey, int, str, str, str], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    ingress: set[tuple[str, NodeKey]] = field(default_factory=set)
    pending: list[PendingServer] = field(default_factory=list)
    open_clients: list[OpenClient] = field(default_factory=list)
    aliases: dict[tuple[str, str], NodeKey] = field(default_factory=dict)
    broken: dict[tuple[str, NodeKey, NodeKey], BrokenContext] = field(default_factory=dict)
    samples: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)


def peer_normalize(value: str) -> str:
    """`CartService:7070` -> `cartservice`; a URL's host is kept as the host."""
    value = value.strip().lower()
    if "://" in value:
        value = value.split("://", 1)[1]
    value = value.split("/", 1)[0]
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value


def peer_lookup(
    known: Mapping[tuple[str, str], NodeKey], env: str, peer: str
) -> NodeKey | None:
    """A peer name -> a traced service: exact name, then its first DNS label
    (`cartservice.shop.svc.cluster.local` -> `cartservice`)."""
    if not peer:
        return None
    hit = known.get((env, peer))
    if hit is None and "." in peer and not peer[0].isdigit():
        hit = known.get((env, peer.split(".", 1)[0]))
    return hit


def resource_environment(attributes: Mapping[str, str]) -> str:
    """The environment a resource's spans belong to."""
    return (
        attributes.get("deployment.environment.name")
        or attributes.get("deployment.environment")
        or "default"
    )[:120]


def peer_keys(resources: Iterable[ResourceSpans]) -> set[tuple[str, str]]:
    """Every (environment, peer) an aggregation of `resources` may look up among the peers
    known from earlier requests (`peer_lookup`, the settled externals): each client or
    producer span's peer, normalized, and its first DNS label. So a job reads the few
    known peers its spans name, not every service of a team that may have 100,000."""
    keys: set[tuple[str, str]] = set()
    for resource in resources:
        env = resource_environment(resource.attributes)
        raws = {
            row[7] for scope in resource.scopes for row in scope.spans
            if row[4] == KIND_CLIENT or row[4] == KIND_PRODUCER
        }
        for peer in map(peer_normalize, raws):
            if not peer:
                continue
            keys.add((env, peer))
            if "." in peer and not peer[0].isdigit():
                keys.add((env, peer.split(".", 1)[0]))
    return keys


def aggregate(
    resources: Iterable[ResourceSpans],
    *,
    bucket_seconds: int = 60,
    sample_rate: float = 0.0,
    known_peers: Mapping[tuple[str, str], NodeKey] | None = None,
    known_externals: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset(),
) -> Aggregate:
    """Aggregate the usable spans of one export request (the parser dropped the rest).

    `known_peers` maps (environment, lower-case peer name) to a traced service already
    known from earlier requests (service names and learned aliases), so a client span to a
    traced peer is held for matching instead of being counted as a call to an external node.
    Deterministic: the same request gives the same aggregate (jobs may run twice).
    """
    agg = Aggregate(bucket_seconds=bucket_seconds)
    bucket_ns = bucket_seconds * 1_000_000_000
    threshold = sample_threshold(sample_rate)
    edges = agg.edges
    libraries = agg.libraries
    # trace_id + span_id -> (env, service, kind, peer name)
    local: dict[bytes, tuple[str, NodeKey, int, str]] = {}
    servers: list[tuple[Any, ...]] = []
    clients: dict[bytes, tuple[Any, ...]] = {}
    matched: set[bytes] = set()
    roots: dict[tuple[str, NodeKey], list[tuple[int, int, str]]] = defaultdict(list)
    known: dict[tuple[str, str], NodeKey] = dict(known_peers or {})
    peer_cache: dict[str, str] = {}
    total = 0

    for resource in resources:
        rattrs = resource.attributes
        env = resource_environment(rattrs)
        name = (rattrs.get("service.name") or "unknown_service")[:200]
        namespace = rattrs.get("service.namespace", "")[:120]
        service: NodeKey = (SERVICE, namespace, name)
        skey = (env, service)
        info = agg.services.get(skey)
        if info is None:
            info = agg.services[skey] = ServiceInfo()
        info.version = rattrs.get("service.version", info.version)[:120]
        for key in RESOURCE_KEYS:
            if key in rattrs:
                info.attributes[key] = rattrs[key][:300]
        known.setdefault((env, name.lower()), service)
        first_ns, last_ns = info.first_ns, info.last_ns
        for scope in resource.scopes:
            scope_name = scope.name[:200]
            scope_version = scope.version[:120]
            # Counted per bucket here and added once per scope: all its spans share it.
            scope_counts: dict[int, int] = {}
            total += len(scope.spans)
            for (span_key, parent, start, end, kind, error, span_name, raw_peer, is_db,
                 tls, mtls, span_libraries) in scope.spans:
                bucket = start // bucket_ns
                if first_ns == 0 or start < first_ns:
                    first_ns = start
                if end > last_ns:
                    last_ns = end
                scope_counts[bucket] = scope_counts.get(bucket, 0) + 1
                if span_libraries is not None:
                    for lib_kind, lib_name in span_libraries:
                        libraries[(env, service, bucket, lib_kind, lib_name, "")] += 1
                # Only a client or producer span names its peer.
                peer = ""
                if kind in (KIND_CLIENT, KIND_PRODUCER):
                    peer = peer_cache.get(raw_peer)  # type: ignore[assignment]
                    if peer is None:
                        peer = peer_cache[raw_peer] = peer_normalize(raw_peer)
                    clients[span_key] = (
                        env, service, peer, is_db, bucket, end - start, error, tls, mtls,
                        end, span_key, start,
                    )
                elif kind in (KIND_SERVER, KIND_CONSUMER):
                    servers.append(
                        (env, service, parent, bucket, end - start, error, tls, mtls, end,
                         span_key, start, kind, raw_peer)
                    )
                local[span_key] = (env, service, kind, peer)
                # The parser read names only for its own sample (None elsewhere), which is
                # at least this one when both are given the same rate.
                if (
                    span_name is not None
                    and threshold is not None
                    and span_key[8:16] < threshold
                ):
                    agg.samples.setdefault((env, span_key[:16].hex()), []).append(
                        {
                            "span_id": span_key[16:].hex(),
                            "parent_span_id": parent.hex(),
                            "service": name,
                            "name": span_name[:200],
                            "kind": kind,
                            "start_ns": start,
                            "duration_us": (end - start) // 1000,
                            "error": error,
                            "peer": peer,
                        }
                    )
            if scope_name:
                for bucket, count in scope_counts.items():
                    libraries[(env, service, bucket, "scope", scope_name, scope_version)] += count
        info.first_ns, info.last_ns = first_ns, last_ns
    agg.spans = total

    # Server side: the parent span's service is the caller.
    for (env, service, parent, bucket, dur, error, tls, mtls, end, span_key, start,
         kind, client) in servers:
        if not parent:
            if kind == KIND_SERVER:
                # A root server span is an entry from the internet only when its caller is
                # outside: a public address, or none recorded. Loopback and private callers
                # are counted per minute as the service's local or internal origins.
                origin = classify_address(client or None)
                if origin == "internet":
                    agg.ingress.add((env, service))
                    if client:
                        # Named in the exposure explanation ("root span from public client
                        # 203.0.113.7"); the latest one of each request is kept.
                        info = agg.services.get((env, service))
                        if info is not None:
                            info.attributes[INGRESS_CLIENT_ATTRIBUTE] = client[:100]
                    _edge(edges, env, INTERNET_NODE, service, bucket).add_call(
                        dur, error, tls, mtls, end
                    )
                else:
                    libraries[(env, service, bucket, "origin", origin, "")] += 1
                roots[(env, service)].append((start, end, span_key[:16].hex()))
            continue
        parent_key = span_key[:16] + parent
        caller = local.get(parent_key)
        if caller is None:
            agg.pending.append(
                PendingServer(
                    env=env, service=service, parent_span_id=span_id_int(parent),
                    bucket=bucket, dur_ns=dur, error=error, tls=tls, mtls=mtls, end_ns=end,
                    trace_id=span_key[:16].hex(),
                )
            )
            continue
        if parent_key in clients:
            matched.add(parent_key)
            caller_peer = caller[3]
            if caller_peer and caller_peer != service[2].lower():
                agg.aliases[(env, caller_peer)] = service
        if caller[1] != service:
            # _edge inlined: this runs once per matched call.
            edge_key = (env, caller[1], service, bucket)
            stat = edges.get(edge_key)
            if stat is None:
                stat = edges[edge_key] = EdgeStat()
            stat.add_call(dur, error, tls, mtls, end)

    for root_list in roots.values():
        root_list.sort()
    root_starts = {key: [r[0] for r in value] for key, value in roots.items()}

    # Client side: calls whose callee sent no span in this request.
    for client_key, (env, service, peer, is_db, bucket, dur, error, tls, mtls, end, _key,
              start) in clients.items():
        if client_key in matched:
            continue
        target = None if is_db else peer_lookup(known, env, peer)
        if target == service:
            continue
        if target is not None:
            # A traced callee that started a new trace while this call was open: the
            # context was lost on the way (design formula 10).
            starts = root_starts.get((env, target))
            if starts:
                i = bisect.bisect_left(starts, start - CLOCK_SKEW_NS)
                if i < len(starts) and starts[i] <= end + CLOCK_SKEW_NS:
                    root = roots[(env, target)][i]
                    broken = agg.broken.get((env, service, target))
                    if broken is None:
                        broken = agg.broken[(env, service, target)] = BrokenContext(
                            first_ns=start
                        )
                    broken.count += 1
                    broken.first_ns = min(broken.first_ns, start)
                    broken.last_ns = max(broken.last_ns, end)
                    if len(broken.examples) < 5:
                        broken.examples.append(
                            {"caller_trace_id": client_key[:16].hex(), "callee_trace_id": root[2]}
                        )
                    continue
        if target is None and peer and (is_db or (env, peer) in known_externals):
            # Databases and settled external peers send no server spans: count it now.
            _edge(edges, env, service, (EXTERNAL, "", peer[:200]), bucket).add_call(
                dur, error, tls, mtls, end
            )
            continue
        agg.open_clients.append(
            OpenClient(
                env=env, service=service, span_id=span_id_int(client_key[16:]), peer=peer[:200],
                target=target, bucket=bucket, start_ns=start, end_ns=end,
                trace_id=client_key[:16].hex(), dur_ns=dur, error=error, tls=tls, mtls=mtls,
            )
        )
    return agg


def _edge(
    edges: dict[tuple[str, NodeKey, NodeKey, int], EdgeStat],
    env: str,
    caller: NodeKey,
    callee: NodeKey,
    bucket: int,
) -> EdgeStat:
    key = (env, caller, callee, bucket)
    stat = edges.get(key)
    if stat is None:
        stat = edges[key] = EdgeStat()
    return stat


def span_id_int(span_id: bytes) -> int:
    """8-byte span id -> signed 64-bit integer (a PostgreSQL bigint)."""
    return int.from_bytes(span_id, "big", signed=True)
