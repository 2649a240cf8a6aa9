"""The per-environment graph: exposure (SSVC System Exposure) and trust (formula 1).

Nodes are tuples `(kind, name…)`: `("internet",)`, `("service", name)`, `("peer", name)`,
`("identity", id)`, and, when asked for, `("version", key)` and `("component", version,
key)`. Edges carry what was observed: call edges their rate, error rate, mTLS share and hop
identity strength `sig`; `internet → service` edges say why the service is an entry point.

Everything here depends only on the environment's services, call edges, peers, root-span
origins and identities: `environment_digest` hashes exactly those, so the wiring can keep
an `EnvironmentAnalysis` across runs and recompute it only when the digest changes.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx
import orjson

from trustrank.risk.inputs import (
    CallEdge,
    Component,
    Deployment,
    Exposure,
    ExposureValue,
    ExternalPeer,
    RootSpanOrigin,
    Service,
)

INTERNET = ("internet",)


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop of the path from the internet. `via` says why the hop exists: `calls` for an
    observed call edge, or for the first hop the entry-point evidence (`operator override`,
    `ingress candidate`, `root spans from internet addresses`, `calls from external peer`)."""

    source: str
    target: str
    via: str
    calls_per_minute: float = 0.0
    mtls_share: float | None = None
    sig: float | None = None
    detail: str = ""
    # The last hour's rate and the window's busiest minute (CallEdge), when known.
    recent_calls_per_minute: float | None = None
    peak_calls_per_minute: float | None = None


@dataclass(frozen=True, slots=True)
class ServiceContext:
    """Graph-level facts about one service.

    `identity_trust` is formula 1's best-path trust from any anchor (0 when no anchor
    reaches it); `trust_anchor` and `trust_depth` name the path that gave it. `path` is the
    service names from the internet (first element "internet"), empty unless exposure is
    open; `hops` the same path with evidence. `exposure_reason` is a sentence for people.
    `observed` is False when the graph saw nothing of how the service is reached (no entry
    point, no caller, no root span): its "small" then only means that nothing was seen,
    and a deployed service that sends no traces has an unknown exposure instead (see
    `context.ContextIndex`). `not_entry_point` is the operator's "not an entry point"
    mark, said for people (empty when there is none): for a service that sends no traces
    it makes the exposure controlled rather than unknown."""

    environment: str
    name: str
    exposure: ExposureValue
    exposure_reason: str
    path: tuple[str, ...]
    hops: tuple[Hop, ...]
    identity_trust: float
    trust_anchor: str
    trust_depth: int
    identity: str
    observed: bool = True
    not_entry_point: str = ""


@dataclass(frozen=True, slots=True)
class EnvironmentAnalysis:
    environment: str
    digest: str
    services: Mapping[str, ServiceContext]


def environment_digest(
    *,
    environment: str,
    services: Iterable[Service],
    edges: Iterable[CallEdge],
    peers: Iterable[ExternalPeer],
    origins: Iterable[RootSpanOrigin],
    settings_version: str,
) -> str:
    """SHA-256 over the sorted graph inputs of one environment (and the settings version,
    since decay and floor change the result)."""
    h = hashlib.sha256(settings_version.encode())
    for items in (services, edges, peers, origins):
        h.update(b"\x00")
        rows = sorted((_fields(x) for x in items if x.environment == environment), key=repr)
        h.update(orjson.dumps(rows))
    return h.hexdigest()


def _fields(record: Service | CallEdge | ExternalPeer | RootSpanOrigin) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in record.__slots__)


def environment_graph(
    *,
    services: Iterable[Service],
    edges: Iterable[CallEdge],
    peers: Iterable[ExternalPeer],
    origins: Iterable[RootSpanOrigin],
    deployments: Iterable[Deployment] = (),
    components: Iterable[Component] = (),
) -> nx.DiGraph:
    """One environment's graph. Pass only that environment's records. Components are
    optional: the analysis does not need them, the service map and explanations do."""
    g: nx.DiGraph = nx.DiGraph()
    g.add_node(INTERNET, kind="internet")
    service_list = sorted(services, key=lambda s: s.name)
    for s in service_list:
        g.add_node(("service", s.name), kind="service", service=s)
        if s.identity_strength is not None:
            ident = ("identity", s.identity or s.name)
            g.add_node(ident, kind="identity")
            g.add_edge(ident, ("service", s.name), kind="attests", sig=s.identity_strength)
    peer_names = set()
    for p in sorted(peers, key=lambda p: p.name):
        peer_names.add(p.name)
        g.add_node(("peer", p.name), kind="peer", address_class=p.address_class)
        if p.address_class == "internet":
            g.add_edge(INTERNET, ("peer", p.name), kind="peer")
    by_pair: dict[tuple[str, str], list[CallEdge]] = defaultdict(list)
    for e in edges:
        if e.caller != e.callee:
            by_pair[(e.caller, e.callee)].append(e)
    call_edges = []
    for (caller, callee), group in sorted(by_pair.items()):
        if len(group) == 1:
            e = group[0]
            rate, error_rate, mtls_share, sig = (e.calls_per_minute, e.error_rate, e.mtls_share,
                                                 e.sig)
            recent, peak = e.recent_calls_per_minute, e.peak_calls_per_minute
        else:
            # Several records for one pair (time buckets, protocols): rate-weighted means,
            # and the weakest identity, since any unauthenticated traffic weakens the hop.
            # Sorted first so float sums do not depend on input order.
            group.sort(key=lambda e: (
                e.calls_per_minute, e.error_rate, e.mtls_share, e.sig,
                -1.0 if e.recent_calls_per_minute is None else e.recent_calls_per_minute,
                -1.0 if e.peak_calls_per_minute is None else e.peak_calls_per_minute,
            ))
            rate = sum(e.calls_per_minute for e in group)
            weights = [e.calls_per_minute or 1.0 for e in group]
            total = sum(weights)
            pairs = list(zip(group, weights, strict=True))
            error_rate = sum(e.error_rate * w for e, w in pairs) / total
            mtls_share = sum(e.mtls_share * w for e, w in pairs) / total
            sig = min(e.sig for e in group)
            # Summed like the rate; the sum of peaks bounds the peak of the sum.
            recents = [e.recent_calls_per_minute for e in group]
            peaks = [e.peak_calls_per_minute for e in group]
            recent = None if None in recents else sum(r or 0.0 for r in recents)
            peak = None if None in peaks else sum(p or 0.0 for p in peaks)
        src = ("peer", caller) if caller in peer_names else ("service", caller)
        dst = ("peer", callee) if callee in peer_names else ("service", callee)
        call_edges.append((src, dst, {"kind": "calls", "calls_per_minute": rate,
                                      "error_rate": error_rate, "mtls_share": mtls_share,
                                      "sig": sig, "recent": recent, "peak": peak}))
    g.add_edges_from(call_edges)
    origin_spans: dict[tuple[str, str], int] = defaultdict(int)
    examples: dict[tuple[str, str], str] = {}
    for o in origins:
        origin_spans[(o.service, o.address_class)] += o.spans
        if o.example_address:
            key = (o.service, o.address_class)
            examples[key] = min(examples.get(key, o.example_address), o.example_address)
    for s in service_list:
        node = ("service", s.name)
        g.nodes[node]["origins"] = {
            cls: origin_spans.get((s.name, cls), 0) for cls in ("local", "internal", "internet")
        }
        g.nodes[node]["origin_example"] = examples.get((s.name, "internet"), "")
        entry = _entry_evidence(s, g, origin_spans)
        if entry:
            via, detail = entry
            spans_text = detail
            example = g.nodes[node]["origin_example"]
            if via == "root spans from internet addresses" and example:
                detail = f"root span from public client {example} ({spans_text})"
            g.add_edge(INTERNET, node, kind="ingress", via=via, detail=detail)
    deployments = sorted(deployments, key=lambda d: (d.service, d.project_version))
    by_version: dict[str, list[Component]] = defaultdict(list)
    for c in components:
        by_version[c.project_version].append(c)
    for d in deployments:
        version = ("version", d.project_version)
        g.add_edge(("service", d.service), version, kind="runs", human_impact=d.human_impact)
        for c in sorted(by_version.get(d.project_version, ()), key=lambda c: c.key):
            g.add_edge(version, ("component", d.project_version, c.key), kind="contains")
    return g


def _entry_evidence(
    s: Service, g: nx.DiGraph, origin_spans: Mapping[tuple[str, str], int]
) -> tuple[str, str] | None:
    if s.ingress_override is not None:
        if not s.ingress_override:
            return None
        return "operator override", s.ingress_detail or "operator marked ingress"
    # Observed ingress first: it is the stronger evidence for the explanation.
    spans = origin_spans.get((s.name, "internet"), 0)
    if spans:
        return "root spans from internet addresses", f"{spans} root spans from internet addresses"
    if s.ingress_candidate:
        return "ingress candidate", s.ingress_detail or "declared reachable from outside"
    for pred in sorted(g.predecessors(("service", s.name))):
        if pred[0] == "peer" and g.nodes[pred].get("address_class") == "internet":
            return "calls from external peer", f"calls from external peer {pred[1]}"
    return None


def analyse_environment(
    *,
    environment: str,
    services: Iterable[Service],
    edges: Iterable[CallEdge],
    peers: Iterable[ExternalPeer],
    origins: Iterable[RootSpanOrigin],
    decay: float = 0.95,
    trust_floor: float = 1e-6,
    settings_version: str = "",
) -> EnvironmentAnalysis:
    services = [s for s in services if s.environment == environment]
    edges = [e for e in edges if e.environment == environment]
    peers = [p for p in peers if p.environment == environment]
    origins = [o for o in origins if o.environment == environment]
    digest = environment_digest(
        environment=environment, services=services, edges=edges, peers=peers, origins=origins,
        settings_version=settings_version,
    )
    # A call edge may name a service that has no record of its own (it sent no spans in
    # the window but its callers did): it is still a service of the graph.
    known = {s.name for s in services} | {p.name for p in peers}
    services += [
        Service(environment=environment, name=name)
        for name in sorted({n for e in edges for n in (e.caller, e.callee)} - known)
    ]
    g = environment_graph(services=services, edges=edges, peers=peers, origins=origins)
    names = sorted(s.name for s in services)
    succ: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    callers: dict[str, int] = defaultdict(int)
    for src, dst, data in g.edges(data=True):
        if data["kind"] != "calls" or dst[0] != "service":
            continue
        callers[dst[1]] += 1
        if src[0] == "service":
            succ[src[1]].append((dst[1], data["sig"]))
    for lst in succ.values():
        lst.sort()

    hops_to = _paths_from_internet(g, names)
    anchors = {
        s.name: max(0.0, min(1.0, s.identity_strength / 100.0))
        for s in services
        if s.identity_strength is not None
    }
    trust = propagate_trust(anchors=anchors, succ=succ, decay=decay, floor=trust_floor)
    by_name = {s.name: s for s in services}

    contexts: dict[str, ServiceContext] = {}
    for name in names:
        node = g.nodes[("service", name)]
        hops = hops_to.get(name, ())
        origins_of = node["origins"]
        exposure: Exposure
        if hops:
            exposure = "open"
            reason = f"reachable from the internet in {len(hops)} hop(s)"
        elif callers[name] or origins_of["internal"] or origins_of["internet"]:
            exposure = "controlled"
            reason = "called only from inside the network"
        else:
            exposure = "small"
            reason = (
                "only local callers" if origins_of["local"] else "no network callers observed"
            )
        if not hops and by_name[name].ingress_override is False:
            # The operator's "not an entry point" wins over the evidence; say so, and whose.
            reason += f" ({by_name[name].ingress_detail or 'operator: not an entry point'})"
        value, depth, anchor = trust.get(name, (0.0, 0, ""))
        contexts[name] = ServiceContext(
            environment=environment,
            name=name,
            exposure=exposure,
            exposure_reason=reason,
            path=("internet", *(h.target for h in hops)) if hops else (),
            hops=hops,
            identity_trust=round(value, 6),
            trust_anchor=anchor,
            trust_depth=depth,
            identity=by_name[name].identity,
            observed=bool(hops or callers[name] or any(origins_of.values())),
            not_entry_point=(by_name[name].ingress_detail or "operator: not an entry point")
            if by_name[name].ingress_override is False else "",
        )
    return EnvironmentAnalysis(environment=environment, digest=digest, services=contexts)


def _paths_from_internet(g: nx.DiGraph, names: list[str]) -> dict[str, tuple[Hop, ...]]:
    """Fewest-hop path from the internet to every open service. Entry points and
    neighbours are visited in name order, so ties always resolve the same way."""
    paths: dict[str, tuple[Hop, ...]] = {}
    frontier: list[str] = []
    for name in names:
        data = g.get_edge_data(INTERNET, ("service", name))
        if data is not None:
            paths[name] = (Hop(source="internet", target=name, via=data["via"],
                               detail=data["detail"]),)
            frontier.append(name)
    while frontier:
        nxt: list[str] = []
        for name in frontier:
            for dst, data in sorted(g.succ[("service", name)].items()):
                if dst[0] != "service" or data["kind"] != "calls" or dst[1] in paths:
                    continue
                paths[dst[1]] = (
                    *paths[name],
                    Hop(
                        source=name,
                        target=dst[1],
                        via="calls",
                        calls_per_minute=round(data["calls_per_minute"], 4),
                        mtls_share=round(data["mtls_share"], 4),
                        sig=data["sig"],
                        recent_calls_per_minute=_round(data.get("recent")),
                        peak_calls_per_minute=_round(data.get("peak")),
                    ),
                )
                nxt.append(dst[1])
        frontier = nxt
    return paths


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def propagate_trust(
    *,
    anchors: Mapping[str, float],
    succ: Mapping[str, list[tuple[str, float]]],
    decay: float = 0.95,
    floor: float = 1e-6,
) -> dict[str, tuple[float, int, str]]:
    """Formula 1 over the call graph: `trust(child) = trust(parent) · decay^depth ·
    min(1, sig/100)`, where depth is the child's hop count from the anchor (1 for a direct
    callee) and the result is the best product over all paths from any anchor.

    The per-hop factor depends on depth, so a plain Dijkstra on -log weights is not exact:
    a longer path with stronger identities can lose to a shorter one further on. This is a
    best-first search over (node, depth) labels: labels pop in decreasing trust, so the
    first label popped at a node is its best trust; a later label at that node is kept only
    when it is shallower (it may still give descendants more). All factors are at most 1
    and `floor` ends paths whose trust no longer matters, so each node keeps few labels.
    Returns node → (trust, depth, anchor) for nodes with trust ≥ floor."""
    powers = [decay**d for d in range(64)]
    best: dict[str, tuple[float, int, str]] = {}
    shallowest: dict[str, int] = {}
    heap: list[tuple[float, int, str, str]] = [
        (-t, 0, name, name) for name, t in sorted(anchors.items()) if t >= floor
    ]
    heapq.heapify(heap)
    while heap:
        neg, depth, node, anchor = heapq.heappop(heap)
        seen = shallowest.get(node)
        if seen is not None and depth >= seen:
            continue
        shallowest[node] = depth
        if node not in best:
            best[node] = (-neg, depth, anchor)
        child_depth = depth + 1
        step = powers[child_depth] if child_depth < len(powers) else decay**child_depth
        for child, sig in succ.get(node, ()):
            value = -neg * step * min(1.0, sig / 100.0)
            if value < floor:
                continue
            known = shallowest.get(child)
            if known is not None and child_depth >= known:
                continue
            heapq.heappush(heap, (-value, child_depth, child, anchor))
    return best
