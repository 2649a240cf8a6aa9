"""Columnar aggregation of span rows into a call graph: `engine.aggregate`'s answer, with
numpy doing the per-span work. No ORM, no Django.

The rows of every scope are turned into columns (one C-level transpose per scope), and
what `engine.aggregate` does span by span is done per group: calls matched inside the
request, entries from the internet and calls to databases and settled external peers
are grouped by (environment, caller, callee, time bucket) with one `np.unique` and
counted with `np.bincount`, latency histograms included; library evidence is counted per
(service, bucket, library list) with a C-level `Counter`. Python still runs per span only
where a span becomes a row of its own anyway (a server span whose parent is in another
request, a client span held open for its callee, a sampled trace, a lost trace context).

A request whose span ids repeat (a retrying exporter) goes to `engine.aggregate`: which of
the duplicates counts is a question of order that the reference loop answers.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import chain, compress, repeat
from operator import add, is_not, itemgetter
from typing import Any

import numpy as np

from trustrank.parsers.otlp import ResourceSpans, sample_threshold
from trustrank.risk.addresses import classify_address
from trustrank.runtime import engine
from trustrank.runtime.engine import (
    CLOCK_SKEW_NS,
    EXTERNAL,
    INGRESS_CLIENT_ATTRIBUTE,
    INTERNET_NODE,
    KIND_CLIENT,
    KIND_CONSUMER,
    KIND_PRODUCER,
    KIND_SERVER,
    RESOURCE_KEYS,
    SERVICE,
    Aggregate,
    BrokenContext,
    EdgeStat,
    NodeKey,
    OpenClient,
    PendingServer,
    ServiceInfo,
    peer_lookup,
    peer_normalize,
    resource_environment,
    span_id_int,
)
from trustrank.runtime.engine_histograms import HIST_BUCKETS

_TRACE = itemgetter(slice(0, 16))


def hist_indexes(us: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`engine_histograms.hist_index` of every duration (microseconds, int64) at once."""
    us = np.maximum(us, 0)
    small = us < 4
    safe = np.where(small, 4, us)
    bits = np.floor(np.log2(safe.astype(np.float64))).astype(np.int64) + 1
    # log2 of a float can be one off near a power of two: correct to the exact bit length.
    bits -= (np.left_shift(np.int64(1), bits - 1) > safe).astype(np.int64)
    bits += (np.left_shift(np.int64(1), bits) <= safe).astype(np.int64)
    idx = (bits - 2) * 4 + (np.right_shift(safe, bits - 3) & 3)
    idx = np.minimum(idx, HIST_BUCKETS - 1)
    return np.where(small, us, idx)


class _Edges:
    """Calls to add to edges, as columns; grouped and counted once in `fold`."""

    def __init__(self) -> None:
        self.parts: list[tuple[Any, ...]] = []

    def add(self, env: Any, caller: Any, callee: Any, bucket: Any, dur: Any, error: Any,
            tls: Any, mtls: Any, end: Any) -> None:
        if len(bucket):
            self.parts.append((env, caller, callee, bucket, dur, error, tls, mtls, end))

    def fold(self, agg: Aggregate, envs: list[str], nodes: list[NodeKey]) -> None:
        if not self.parts:
            return
        env, caller, callee, bucket, dur, error, tls, mtls, end = (
            np.concatenate([np.asarray(part[i]) for part in self.parts]) for i in range(9)
        )
        env, caller, callee, bucket = (
            column.astype(np.int64) for column in (env, caller, callee, bucket)
        )
        # One int64 per (environment, caller, callee, bucket): np.unique on one column is a
        # plain sort, where on four (axis=1) it is a slow sort of records.
        low = int(bucket.min())
        sizes = [int(env.max()) + 1, len(nodes), len(nodes), int(bucket.max()) - low + 1]
        if sizes[0] * sizes[1] * sizes[2] * sizes[3] < 2**62:
            packed = ((env * sizes[1] + caller) * sizes[2] + callee) * sizes[3] + (bucket - low)
            packed_unique, group = np.unique(packed, return_inverse=True)
            packed_unique, b = np.divmod(packed_unique, sizes[3])
            packed_unique, c = np.divmod(packed_unique, sizes[2])
            e, a = np.divmod(packed_unique, sizes[1])
            unique = np.stack([e, a, c, b + low])
        else:
            keys = np.stack([env, caller, callee, bucket]).astype(np.int64)
            unique, group = np.unique(keys, axis=1, return_inverse=True)
        group = group.reshape(-1)
        count = unique.shape[1]
        calls = np.bincount(group, minlength=count)
        errors = np.bincount(group, weights=error, minlength=count)
        secure = np.bincount(group, weights=tls | mtls, minlength=count)
        mutual = np.bincount(group, weights=mtls, minlength=count)
        last = np.zeros(count, dtype=np.int64)
        np.maximum.at(last, group, end)
        hist = np.bincount(group * HIST_BUCKETS + hist_indexes(dur // 1000),
                           minlength=count * HIST_BUCKETS).reshape(count, HIST_BUCKETS)
        edges = agg.edges
        for g, (e, a, b, bk) in enumerate(unique.T.tolist()):
            key = (envs[e], nodes[a], nodes[b], bk)
            stat = edges.get(key)
            if stat is None:
                stat = edges[key] = EdgeStat()
            stat.calls += int(calls[g])
            stat.errors += int(errors[g])
            stat.tls += int(secure[g])
            stat.mtls += int(mutual[g])
            stat.last_ns = max(stat.last_ns, int(last[g]))
            row = hist[g]
            for idx in np.flatnonzero(row).tolist():
                stat.hist[idx] = stat.hist.get(idx, 0) + int(row[idx])


def aggregate(
    resources: Iterable[ResourceSpans],
    *,
    bucket_seconds: int = 60,
    sample_rate: float = 0.0,
    known_peers: Mapping[tuple[str, str], NodeKey] | None = None,
    known_externals: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset(),
) -> Aggregate:
    """As `engine.aggregate` (the same arguments, an equal Aggregate)."""
    resources = tuple(resources)
    agg = Aggregate(bucket_seconds=bucket_seconds)
    bucket_ns = bucket_seconds * 1_000_000_000
    threshold = sample_threshold(sample_rate)
    known: dict[tuple[str, str], NodeKey] = dict(known_peers or {})
    libraries = agg.libraries

    # Services (environment, node) and nodes are numbered; every span gets its service's.
    services: dict[tuple[str, NodeKey], int] = {}
    env_ids: dict[str, int] = {}
    node_ids: dict[NodeKey, int] = {}
    svc_env: list[int] = []
    svc_node: list[int] = []
    columns: list[tuple[Any, ...]] = []
    span_svc: list[Any] = []
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
        svc = services.get(skey)
        if svc is None:
            svc = services[skey] = len(services)
            svc_env.append(env_ids.setdefault(env, len(env_ids)))
            svc_node.append(node_ids.setdefault(service, len(node_ids)))
        first_ns, last_ns = info.first_ns, info.last_ns
        for scope in resource.scopes:
            rows = scope.spans
            if not rows:
                continue
            total += len(rows)
            scope_columns = tuple(zip(*rows, strict=True))
            columns.append(scope_columns)
            span_svc.append(np.full(len(rows), svc, dtype=np.int64))
            scope_starts, scope_ends = scope_columns[2], scope_columns[3]
            low = min(scope_starts)
            if first_ns == 0 or low < first_ns:
                first_ns = low
            last_ns = max(last_ns, max(scope_ends))
            scope_name = scope.name[:200]
            if scope_name:
                scope_version = scope.version[:120]
                buckets, counts = np.unique(
                    np.array(scope_starts, dtype=np.int64) // bucket_ns, return_counts=True
                )
                for bucket, count in zip(buckets.tolist(), counts.tolist(), strict=True):
                    libraries[(env, service, bucket, "scope", scope_name, scope_version)] += count
        info.first_ns, info.last_ns = first_ns, last_ns
    agg.spans = total
    if not columns:
        return agg

    (keys, parents, starts_t, ends_t, kinds_t, errors_t, names, raw_peers, is_db_t, tls_t,
     mtls_t, span_libraries) = (list(chain.from_iterable(c[i] for c in columns))
                                for i in range(12))
    count = len(keys)
    index = dict(zip(keys, range(count), strict=True))
    if len(index) != count:
        return engine.aggregate(
            resources, bucket_seconds=bucket_seconds, sample_rate=sample_rate,
            known_peers=known_peers, known_externals=known_externals,
        )
    envs = list(env_ids)
    nodes = list(node_ids)
    svc_services = list(services)
    svc_of = np.concatenate(span_svc)
    env_of = np.array(svc_env, dtype=np.int64)[svc_of]
    node_of = np.array(svc_node, dtype=np.int64)[svc_of]
    starts = np.array(starts_t, dtype=np.int64)
    ends = np.array(ends_t, dtype=np.int64)
    kinds = np.array(kinds_t, dtype=np.int64)
    errors = np.array(errors_t, dtype=bool)
    is_db = np.array(is_db_t, dtype=bool)
    tls = np.array(tls_t, dtype=bool)
    mtls = np.array(mtls_t, dtype=bool)
    durations = ends - starts
    buckets = starts // bucket_ns
    bucket_list = buckets.tolist()
    edges = _Edges()

    # Library evidence: spans with the same (service, bucket, library list) counted at
    # once. The parser shares one tuple among the spans naming the same libraries, so the
    # tuples' identities group them (a sort of integers, no tuple hashed per span).
    has_libraries = np.fromiter(map(is_not, span_libraries, repeat(None)), dtype=bool,
                                count=count)
    if has_libraries.any():
        lib_at = np.flatnonzero(has_libraries)
        ids = np.fromiter(map(id, span_libraries), dtype=np.int64, count=count)
        _, lists = np.unique(ids[lib_at], return_inverse=True)
        low = int(buckets.min())
        span_bucket = buckets[lib_at] - low
        width = int(span_bucket.max()) + 1
        groups, first, spans_per_group = np.unique(
            (svc_of[lib_at] * width + span_bucket) * (int(lists.max()) + 1) + lists.reshape(-1),
            return_index=True, return_counts=True,
        )
        for i, spans in zip(lib_at[first].tolist(), spans_per_group.tolist(), strict=True):
            env, service = svc_services[svc_of[i]]
            bucket = bucket_list[i]
            for lib_kind, lib_name in span_libraries[i]:
                libraries[(env, service, bucket, lib_kind, lib_name, "")] += spans
        del groups

    is_client = (kinds == KIND_CLIENT) | (kinds == KIND_PRODUCER)
    is_server = (kinds == KIND_SERVER) | (kinds == KIND_CONSUMER)
    # A client span's peer, normalized (what `local` and `clients` hold in the reference).
    normalized = {raw: peer_normalize(raw) for raw in set(raw_peers)}
    peer_of: list[str] = [
        peer if client else ""
        for peer, client in zip(map(normalized.__getitem__, raw_peers), is_client.tolist(),
                                strict=True)
    ]

    has_parent = np.fromiter(map(len, parents), dtype=np.int64, count=count) > 0
    # Root server spans: from the internet, or counted as local / internal origins.
    roots = np.flatnonzero(is_server & ~has_parent & (kinds == KIND_SERVER))
    if len(roots):
        origins = {raw: classify_address(raw or None) for raw in {raw_peers[i] for i in roots}}
        origin_of = [origins[raw_peers[i]] for i in roots.tolist()]
        internet = np.array([origin == "internet" for origin in origin_of], dtype=bool)
        entry = roots[internet]
        if len(entry):
            for i in entry.tolist():
                env, service = svc_services[svc_of[i]]
                agg.ingress.add((env, service))
                if raw_peers[i]:
                    info = agg.services.get((env, service))
                    if info is not None:
                        info.attributes[INGRESS_CLIENT_ATTRIBUTE] = raw_peers[i][:100]
            internet_node = node_ids.setdefault(INTERNET_NODE, len(node_ids))
            nodes = list(node_ids)
            edges.add(env_of[entry], np.full(len(entry), internet_node), node_of[entry],
                      buckets[entry], durations[entry], errors[entry], tls[entry],
                      mtls[entry], ends[entry])
        for (svc, bucket, origin), spans in Counter(
            (svc, bucket, origin)
            for svc, bucket, origin in zip(svc_of[roots].tolist(), buckets[roots].tolist(),
                                            origin_of, strict=True)
            if origin != "internet"
        ).items():
            env, service = svc_services[svc]
            libraries[(env, service, bucket, "origin", origin, "")] += spans

    # Server spans with a parent: matched inside the request, or pending.
    children = np.flatnonzero(is_server & has_parent)
    matched = np.zeros(count, dtype=bool)
    if len(children):
        child_list = children.tolist()
        parent_keys = map(add, map(_TRACE, [keys[i] for i in child_list]),
                          [parents[i] for i in child_list])
        found_at = [index.get(key, -1) for key in parent_keys]
        caller = np.array(found_at, dtype=np.int64)
        for i in children[caller < 0].tolist():
            env, service = svc_services[svc_of[i]]
            agg.pending.append(PendingServer(
                env=env, service=service, parent_span_id=span_id_int(parents[i]),
                bucket=bucket_list[i], dur_ns=int(durations[i]), error=bool(errors[i]),
                tls=bool(tls[i]), mtls=bool(mtls[i]), end_ns=int(ends[i]),
                trace_id=keys[i][:16].hex(),
            ))
        local = caller >= 0
        callee, caller = children[local], caller[local]
        by_client = is_client[caller]
        matched[caller[by_client]] = True
        # Aliases: the client's peer name names the callee; the last one in span order wins.
        for j, c in zip(callee[by_client].tolist(), caller[by_client].tolist(), strict=True):
            peer = peer_of[c]
            env, service = svc_services[svc_of[j]]
            if peer and peer != service[2].lower():
                agg.aliases[(env, peer)] = service
        calls = node_of[caller] != node_of[callee]
        callee, caller = callee[calls], caller[calls]
        edges.add(env_of[callee], node_of[caller], node_of[callee], buckets[callee],
                  durations[callee], errors[callee], tls[callee], mtls[callee], ends[callee])

    # Client spans whose callee sent no span in this request: what becomes of one depends
    # on (service, peer, database) alone, except for the calls to traced services.
    open_at = np.flatnonzero(is_client & ~matched).tolist()
    svc_list = svc_of.tolist()
    db_list = is_db.tolist()
    looks = [(svc_list[i], peer_of[i], db_list[i]) for i in open_at]
    targets: dict[tuple[int, str, bool], NodeKey | None] = {}
    external_look: dict[tuple[int, str, bool], bool] = {}
    for look in set(looks):
        svc, peer, db = look
        env, service = svc_services[svc]
        target = None if db else peer_lookup(known, env, peer)
        targets[look] = target
        external_look[look] = target is None and bool(peer) and (
            db or (env, peer) in known_externals
        )
    external: list[int] = []
    roots_by_service: dict[tuple[str, NodeKey], list[tuple[int, int, str]]] | None = None
    for i, look in zip(open_at, looks, strict=True):
        if external_look[look]:
            external.append(i)
            continue
        target = targets[look]
        env, service = svc_services[look[0]]
        peer = look[1]
        if target == service:
            continue
        if target is not None:
            if roots_by_service is None:
                roots_by_service = _roots(roots, svc_of, svc_services, starts, ends, keys)
            found_roots = roots_by_service.get((env, target))
            if found_roots:
                start, end = int(starts[i]), int(ends[i])
                root_starts = [r[0] for r in found_roots]
                at = bisect.bisect_left(root_starts, start - CLOCK_SKEW_NS)
                if at < len(root_starts) and root_starts[at] <= end + CLOCK_SKEW_NS:
                    broken = agg.broken.get((env, service, target))
                    if broken is None:
                        broken = agg.broken[(env, service, target)] = BrokenContext(
                            first_ns=start
                        )
                    broken.count += 1
                    broken.first_ns = min(broken.first_ns, start)
                    broken.last_ns = max(broken.last_ns, end)
                    if len(broken.examples) < 5:
                        broken.examples.append({
                            "caller_trace_id": keys[i][:16].hex(),
                            "callee_trace_id": found_roots[at][2],
                        })
                    continue
        agg.open_clients.append(OpenClient(
            env=env, service=service, span_id=span_id_int(keys[i][16:]), peer=peer[:200],
            target=target, bucket=bucket_list[i], start_ns=int(starts[i]), end_ns=int(ends[i]),
            trace_id=keys[i][:16].hex(), dur_ns=int(durations[i]), error=bool(errors[i]),
            tls=bool(tls[i]), mtls=bool(mtls[i]),
        ))
    if external:
        at_external = np.array(external, dtype=np.int64)
        peer_node = {
            peer: node_ids.setdefault((EXTERNAL, "", peer[:200]), len(node_ids))
            for peer in sorted({peer_of[i] for i in external})
        }
        nodes = list(node_ids)
        edges.add(env_of[at_external], node_of[at_external],
                  np.fromiter(map(peer_node.__getitem__, map(peer_of.__getitem__, external)),
                              dtype=np.int64, count=len(external)),
                  buckets[at_external], durations[at_external], errors[at_external],
                  tls[at_external], mtls[at_external], ends[at_external])
    edges.fold(agg, envs, nodes)

    # Span samples: the few spans of sampled traces that the parser gave a name.
    if threshold is not None:
        for i in compress(range(count), map(is_not, names, repeat(None))):
            key = keys[i]
            if key[8:16] < threshold:
                env, service = svc_services[svc_of[i]]
                agg.samples.setdefault((env, key[:16].hex()), []).append({
                    "span_id": key[16:].hex(),
                    "parent_span_id": parents[i].hex(),
                    "service": service[2],
                    "name": names[i][:200],
                    "kind": kinds_t[i],
                    "start_ns": starts_t[i],
                    "duration_us": (ends_t[i] - starts_t[i]) // 1000,
                    "error": errors_t[i],
                    "peer": peer_of[i],
                })
    return agg


def _roots(
    roots: np.ndarray[Any, Any], svc_of: np.ndarray[Any, Any],
    svc_services: list[tuple[str, NodeKey]], starts: np.ndarray[Any, Any],
    ends: np.ndarray[Any, Any], keys: list[bytes],
) -> dict[tuple[str, NodeKey], list[tuple[int, int, str]]]:
    """Root server spans per service, sorted, as the reference keeps them."""
    found: dict[tuple[str, NodeKey], list[tuple[int, int, str]]] = {}
    for i in roots.tolist():
        found.setdefault(svc_services[svc_of[i]], []).append(
            (int(starts[i]), int(ends[i]), keys[i][:16].hex())
        )
    for value in found.values():
        value.sort()
    return found
