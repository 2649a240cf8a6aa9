"""Fold one OTLP export into the call graph: the span window, storing an aggregate, and
resolving calls whose other half arrived in another request."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from trustrank.findings.services.audit import Actor
from trustrank.lib.locks import advisory_xact_lock
from trustrank.parsers.otlp import SpanBatch, SpanWindow
from trustrank.runtime import engine_columns
from trustrank.runtime.engine import EXTERNAL, SERVICE, Aggregate, NodeKey, peer_keys
from trustrank.runtime.services.upserts import (
    _aliases_upsert,
    _broken_upsert,
    _bucket_dt,
    _dt_to_ns,
    _Edge,
    _edges_insert,
    _environments_upsert,
    _libraries_insert,
    _nodes_upsert,
    _ns_to_dt,
    _samples_insert,
)

# Key of pg_advisory_xact_lock: one trace job per team resolves cross-request calls at a
# time, so a caller's and a callee's half arriving together cannot both miss each other.
_LOCK_NAMESPACE = 0x7472_6163  # "trac"


def span_window(*, now: datetime) -> SpanWindow:
    """The span times accepted for an export that arrived at `now` (settings)."""
    return SpanWindow.around(
        now_ns=int(now.timestamp() * 1_000_000_000),
        max_future_ns=settings.TRUSTRANK_TRACE_MAX_FUTURE_SECONDS * 1_000_000_000,
        max_age_ns=settings.TRUSTRANK_TRACE_MAX_AGE_DAYS * 86_400 * 1_000_000_000,
    )


def traces_aggregate_store(
    *, team_id: int, batch: SpanBatch, received_at: datetime
) -> dict[str, Any]:
    """Aggregate one part of an export request (plain span rows) into `team_id`'s call
    graph. Returns the counts to add to the job, `rejected_spans` included."""
    # Aggregated before the lock, so two workers fold two exports of one team at the same
    # time and only their writes take turns. The peers known when this process last read
    # them under the lock are the guess (they rarely change); the locked part checks it.
    keys = peer_keys(batch.resources)
    known = _guessed_peers(team_id, keys)
    if known is None:
        with connection.cursor() as cursor:
            known = _known_peers(cursor, team_id=team_id, keys=keys)
    return traces_aggregate_store_locked(
        team_id=team_id, batch=batch, agg=_aggregate(batch, known), known=known,
        received_at=received_at, keys=keys,
    )


_KnownPeers = tuple[dict[tuple[str, str], NodeKey], set[tuple[str, str]]]


@dataclass
class _PeerGuess:
    """What this process last read under a team's lock about some (environment, peer)
    keys: the traced services they name and the settled externals among them."""

    keys: set[tuple[str, str]] = field(default_factory=set)
    known: dict[tuple[str, str], NodeKey] = field(default_factory=dict)
    externals: set[tuple[str, str]] = field(default_factory=set)


# Team -> its keys read under its lock by this process (a guess only; bounded).
_GUESSES: dict[int, _PeerGuess] = {}
_GUESSED_KEYS_MAX = 100_000


def _guessed_peers(team_id: int, keys: set[tuple[str, str]]) -> _KnownPeers | None:
    """The known peers of `keys` as last read under the team's lock, or None when some key
    was never read."""
    guess = _GUESSES.get(team_id)
    if guess is None or not keys <= guess.keys:
        return None
    return (
        {key: guess.known[key] for key in keys if key in guess.known},
        keys & guess.externals,
    )


def _remember_peers(team_id: int, keys: set[tuple[str, str]], known: _KnownPeers) -> None:
    if sum(len(g.keys) for g in _GUESSES.values()) + len(keys) > _GUESSED_KEYS_MAX:
        _GUESSES.clear()
    guess = _GUESSES.setdefault(team_id, _PeerGuess())
    for key in keys:
        guess.known.pop(key, None)
    guess.externals -= keys
    guess.keys |= keys
    guess.known.update(known[0])
    guess.externals |= known[1]


def _aggregate(batch: SpanBatch, known: _KnownPeers) -> Aggregate:
    return engine_columns.aggregate(
        batch.resources,
        bucket_seconds=settings.TRUSTRANK_TRACE_BUCKET_SECONDS,
        sample_rate=settings.TRUSTRANK_TRACE_SAMPLE_RATE,
        known_peers=known[0],
        known_externals=known[1],
    )


def traces_aggregate_store_locked(
    *, team_id: int, batch: SpanBatch, agg: Aggregate, known: _KnownPeers,
    received_at: datetime, keys: set[tuple[str, str]],
) -> dict[str, Any]:
    """Store `agg`, aggregated from `batch` with the peers `known` then (of `keys`, the
    batch's `peer_keys`), under the team's lock. What the lock guards is read again under
    it: the peers known as traced services or settled externals decide how an unmatched
    client span is stored, so if another job changed them meanwhile, the (deterministic)
    aggregation runs again with what the writes will see."""
    advisory_xact_lock(_LOCK_NAMESPACE, team_id)
    with connection.cursor() as cursor:
        known_now = _known_peers(cursor, team_id=team_id, keys=keys)
    _remember_peers(team_id, keys, known_now)
    if known_now != known:
        agg = _aggregate(batch, known_now)
    agg.rejected = batch.rejected_spans
    if agg.spans == 0:
        return {"spans": 0, "rejected_spans": agg.rejected}
    counts = _store(team_id=team_id, agg=agg, received_at=received_at)
    counts["rejected_spans"] = agg.rejected
    return counts


def _known_peers(
    cursor: Any, *, team_id: int, keys: set[tuple[str, str]]
) -> _KnownPeers:
    """Of the (environment, peer) `keys`: those naming a traced service (by its name, any
    case, or an alias learnt from a matched call; an alias wins) and the settled external
    peers. Index lookups by key (`runtime_service_env_lower_name`, the alias key): the
    cost follows the batch's peers, not the size of the team's graph."""
    if not keys:
        return {}, set()
    envs, peers = zip(*sorted(keys), strict=True)
    cursor.execute(
        """
        WITH k AS (
            SELECT e.id AS env_id, k.env, k.peer
              FROM unnest(%s::text[], %s::text[]) AS k(env, peer)
              JOIN runtime_environment e ON e.team_id = %s AND e.name = k.env
        )
        SELECT k.env, k.peer, s.kind, s.namespace, s.name, 0 AS alias
          FROM k JOIN runtime_service s
            ON s.environment_id = k.env_id AND lower(s.name) = k.peer
         WHERE s.kind IN ('service', 'external')
        UNION ALL
        SELECT k.env, k.peer, s.kind, s.namespace, s.name, 1
          FROM k JOIN runtime_servicealias a ON a.environment_id = k.env_id AND a.peer = k.peer
          JOIN runtime_service s ON s.id = a.service_id
        ORDER BY alias, kind, namespace, name
        """,
        [list(envs), list(peers), team_id],
    )
    known: dict[tuple[str, str], NodeKey] = {}
    externals: set[tuple[str, str]] = set()
    for env, peer, kind, ns, name, _alias in cursor.fetchall():
        if kind == EXTERNAL:
            externals.add((env, peer))
        else:
            known[(env, peer)] = (kind, ns, name)
    return known, externals


def _store(*, team_id: int, agg: Aggregate, received_at: datetime) -> dict[str, Any]:
    bs = agg.bucket_seconds
    with connection.cursor() as cursor:
        env_ids = _environments_upsert(cursor, team_id=team_id, agg=agg, now=received_at)
        node_ids = _nodes_upsert(cursor, agg=agg, env_ids=env_ids, now=received_at)

        edges: dict[tuple[int, int, int, int], _Edge] = defaultdict(_Edge)
        for (env, caller, callee, bucket), stat in agg.edges.items():
            edges[(env_ids[env], node_ids[(env, caller)], node_ids[(env, callee)], bucket)] \
                .merge_stat(stat)

        aliases: dict[tuple[int, str], int] = {
            (env_ids[env], peer): node_ids[(env, node)] for (env, peer), node in agg.aliases.items()
        }
        resolved = _pending_resolve(cursor, agg=agg, env_ids=env_ids, node_ids=node_ids,
                                    edges=edges, aliases=aliases, received_at=received_at)
        matched = _open_clients_resolve(cursor, agg=agg, env_ids=env_ids, node_ids=node_ids,
                                        edges=edges, aliases=aliases, received_at=received_at)
        _edges_insert(cursor, edges=edges, bucket_seconds=bs)
        _libraries_insert(cursor, agg=agg, env_ids=env_ids, node_ids=node_ids)
        _aliases_upsert(cursor, aliases=aliases)
        _broken_upsert(
            agg=agg, env_ids=env_ids, node_ids=node_ids, actor=Actor.system("trace aggregation")
        )
        _samples_insert(cursor, agg=agg, env_ids=env_ids, received_at=received_at)
    return {
        "spans": agg.spans,
        "environments": len(env_ids),
        "services": sum(1 for (_, node) in node_ids if node[0] == SERVICE),
        "edge_buckets": len(edges),
        "resolved_across_requests": resolved + matched,
        "pending_server_spans": len(agg.pending) - resolved,
        "open_client_spans": len(agg.open_clients) - matched,
        "broken_context": sum(b.count for b in agg.broken.values()),
        "sampled_traces": len(agg.samples),
    }


def _pending_resolve(
    cursor: Any,
    *,
    agg: Aggregate,
    env_ids: dict[str, int],
    node_ids: dict[tuple[str, NodeKey], int],
    edges: dict[tuple[int, int, int, int], _Edge],
    aliases: dict[tuple[int, str], int],
    received_at: datetime,
) -> int:
    """Server spans of this request whose parent arrived earlier (in OpenClientSpan)."""
    if not agg.pending:
        return 0
    envs = [env_ids[p.env] for p in agg.pending]
    parents = [p.parent_span_id for p in agg.pending]
    traces = [p.trace_id for p in agg.pending]
    cursor.execute(
        """
        DELETE FROM runtime_openclientspan o
         USING (SELECT DISTINCT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[]))
               AS u(env, sid, tid)
         WHERE o.environment_id = u.env AND o.span_id = u.sid AND o.trace_id = u.tid
        RETURNING o.environment_id, o.span_id, o.trace_id, o.service_id, o.peer
        """,
        [envs, parents, traces],
    )
    found = {
        (env, sid, tid): (service_id, peer)
        for env, sid, tid, service_id, peer in cursor.fetchall()
    }
    rest = []
    for pending in agg.pending:
        env_id = env_ids[pending.env]
        hit = found.get((env_id, pending.parent_span_id, pending.trace_id))
        callee_id = node_ids[(pending.env, pending.service)]
        if hit is None:
            rest.append(pending)
            continue
        caller_id, peer = hit
        if peer and peer != pending.service[2].lower():
            aliases[(env_id, peer)] = callee_id
        if caller_id != callee_id:
            edges[(env_id, caller_id, callee_id, pending.bucket)].add(
                dur_us=pending.dur_ns // 1000, error=pending.error, tls=pending.tls,
                mtls=pending.mtls, end_ns=pending.end_ns,
            )
    bs = agg.bucket_seconds
    with cursor.copy(
        "COPY runtime_pendingserverspan (environment_id, service_id, parent_span_id, "
        "bucket_start, duration_us, error, tls, mtls, end_at, trace_id, received_at) FROM STDIN"
    ) as copy:
        for p in rest:
            copy.write_row((
                env_ids[p.env], node_ids[(p.env, p.service)], p.parent_span_id,
                _bucket_dt(p.bucket, bs), p.dur_ns // 1000, p.error, p.tls, p.mtls,
                _ns_to_dt(p.end_ns), p.trace_id, received_at,
            ))
    return len(agg.pending) - len(rest)


def _open_clients_resolve(
    cursor: Any,
    *,
    agg: Aggregate,
    env_ids: dict[str, int],
    node_ids: dict[tuple[str, NodeKey], int],
    edges: dict[tuple[int, int, int, int], _Edge],
    aliases: dict[tuple[int, str], int],
    received_at: datetime,
) -> int:
    """Client spans of this request whose server span arrived earlier (PendingServerSpan)."""
    if not agg.open_clients:
        return 0
    envs = [env_ids[c.env] for c in agg.open_clients]
    sids = [c.span_id for c in agg.open_clients]
    traces = [c.trace_id for c in agg.open_clients]
    cursor.execute(
        """
        DELETE FROM runtime_pendingserverspan p
         USING (SELECT DISTINCT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[]))
               AS u(env, sid, tid)
         WHERE p.environment_id = u.env AND p.parent_span_id = u.sid AND p.trace_id = u.tid
        RETURNING p.environment_id, p.parent_span_id, p.trace_id, p.service_id, p.bucket_start,
                  p.duration_us, p.error, p.tls, p.mtls, p.end_at
        """,
        [envs, sids, traces],
    )
    bs = agg.bucket_seconds
    by_parent: dict[tuple[int, int, str], list[tuple[Any, ...]]] = defaultdict(list)
    for row in cursor.fetchall():
        by_parent[(row[0], row[1], row[2])].append(row[3:])
    rest = []
    for client in agg.open_clients:
        env_id = env_ids[client.env]
        children = by_parent.get((env_id, client.span_id, client.trace_id))
        if not children:
            rest.append(client)
            continue
        caller_id = node_ids[(client.env, client.service)]
        for callee_id, bucket_start, dur_us, error, tls, mtls, end_at in children:
            if client.peer:
                aliases[(env_id, client.peer)] = callee_id
            if caller_id != callee_id:
                bucket = int(bucket_start.timestamp()) // bs
                edges[(env_id, caller_id, callee_id, bucket)].add(
                    dur_us=dur_us, error=error, tls=tls, mtls=mtls, end_ns=_dt_to_ns(end_at)
                )
    with cursor.copy(
        "COPY runtime_openclientspan (environment_id, service_id, span_id, peer, target_id, "
        "bucket_start, start_at, end_at, duration_us, error, tls, mtls, trace_id, received_at) "
        "FROM STDIN"
    ) as copy:
        for c in rest:
            copy.write_row((
                env_ids[c.env], node_ids[(c.env, c.service)], c.span_id, c.peer,
                node_ids.get((c.env, c.target)) if c.target is not None else None,
                _bucket_dt(c.bucket, bs), _ns_to_dt(c.start_ns), _ns_to_dt(c.end_ns),
                c.dur_ns // 1000, c.error, c.tls, c.mtls, c.trace_id, received_at,
            ))
    return len(agg.open_clients) - len(rest)

