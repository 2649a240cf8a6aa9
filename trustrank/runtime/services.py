"""Writes for runtime evidence: fold OTLP export requests into the call graph.

Everything a job writes goes through set-based SQL (INSERT … SELECT FROM unnest … ON CONFLICT
DO UPDATE adding counts; COPY for the short-lived span index tables), never per-span ORM
calls. A job runs in one transaction (handler atomic=True), so a job that dies half way
leaves nothing and runs again from its stored payload.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.accounts.principal import Principal
from trustrank.findings.services.audit import Actor
from trustrank.lib.locks import advisory_xact_lock
from trustrank.parsers.otlp import SpanBatch, SpanWindow
from trustrank.runtime import engine
from trustrank.runtime.broken_context import (
    BrokenSighting,
    broken_context_record,
    broken_context_resolve_stale,
)
from trustrank.runtime.engine import EXTERNAL, INTERNET_NODE, SERVICE, Aggregate, NodeKey
from trustrank.runtime.models import Service

log = logging.getLogger(__name__)

# Key of pg_advisory_xact_lock: one trace job per team resolves cross-request calls at a
# time, so a caller's and a callee's half arriving together cannot both miss each other.
_LOCK_NAMESPACE = 0x7472_6163  # "trac"


class IngressChangeDenied(PermissionError):
    pass


@dataclass
class _Edge:
    calls: int = 0
    errors: int = 0
    tls: int = 0
    mtls: int = 0
    last_ns: int = 0
    hist: dict[int, int] | None = None

    def merge_stat(self, stat: engine.EdgeStat) -> None:
        self.calls += stat.calls
        self.errors += stat.errors
        self.tls += stat.tls
        self.mtls += stat.mtls
        self.last_ns = max(self.last_ns, stat.last_ns)
        hist = self.hist if self.hist is not None else {}
        for idx, count in stat.hist.items():
            hist[idx] = hist.get(idx, 0) + count
        self.hist = hist

    def add(self, *, dur_us: int, error: bool, tls: bool, mtls: bool, end_ns: int) -> None:
        stat = engine.EdgeStat()
        stat.add(dur_ns=dur_us * 1000, error=error, tls=tls, mtls=mtls, end_ns=end_ns)
        self.merge_stat(stat)


def _ns_to_dt(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


def _dt_to_ns(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000_000)


def _bucket_dt(bucket: int, bucket_seconds: int) -> datetime:
    return datetime.fromtimestamp(bucket * bucket_seconds, tz=UTC)


def _hist_literal(hist: dict[int, int] | None) -> str:
    return "{" + ",".join(str(v) for v in engine.hist_to_list(hist or {})) + "}"


# --- aggregation ------------------------------------------------------------------------


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
    bucket_seconds = settings.TRUSTRANK_TRACE_BUCKET_SECONDS
    advisory_xact_lock(_LOCK_NAMESPACE, team_id)
    with connection.cursor() as cursor:
        known, externals = _known_peers(cursor, team_id=team_id)
    agg = engine.aggregate(
        batch.resources,
        bucket_seconds=bucket_seconds,
        sample_rate=settings.TRUSTRANK_TRACE_SAMPLE_RATE,
        known_peers=known,
        known_externals=externals,
    )
    agg.rejected = batch.rejected_spans
    if agg.spans == 0:
        return {"spans": 0, "rejected_spans": agg.rejected}
    counts = _store(team_id=team_id, agg=agg, received_at=received_at)
    counts["rejected_spans"] = agg.rejected
    return counts


def _known_peers(
    cursor: Any, *, team_id: int
) -> tuple[dict[tuple[str, str], NodeKey], set[tuple[str, str]]]:
    """(peer name -> traced service, settled external peers) of the team's environments."""
    cursor.execute(
        """
        SELECT e.name, lower(s.name), s.kind, s.namespace, s.name
          FROM runtime_service s JOIN runtime_environment e ON e.id = s.environment_id
         WHERE e.team_id = %s AND s.kind IN ('service', 'external')
        UNION ALL
        SELECT e.name, a.peer, s.kind, s.namespace, s.name
          FROM runtime_servicealias a
          JOIN runtime_service s ON s.id = a.service_id
          JOIN runtime_environment e ON e.id = a.environment_id
         WHERE e.team_id = %s
        """,
        [team_id, team_id],
    )
    known: dict[tuple[str, str], NodeKey] = {}
    externals: set[tuple[str, str]] = set()
    for env, peer, kind, ns, name in cursor.fetchall():
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
        _edges_upsert(cursor, edges=edges, bucket_seconds=bs)
        _libraries_upsert(cursor, agg=agg, env_ids=env_ids, node_ids=node_ids)
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


def _environments_upsert(
    cursor: Any, *, team_id: int, agg: Aggregate, now: datetime
) -> dict[str, int]:
    names = sorted({env for env, _ in agg.services})
    cursor.execute(
        """
        INSERT INTO runtime_environment (team_id, name, first_seen, last_seen)
        SELECT %s, n, %s, %s FROM unnest(%s::text[]) AS n
        ON CONFLICT (team_id, name) DO UPDATE SET last_seen = EXCLUDED.last_seen
        RETURNING name, id
        """,
        [team_id, now, now, names],
    )
    return dict(cursor.fetchall())


def _nodes_upsert(
    cursor: Any, *, agg: Aggregate, env_ids: dict[str, int], now: datetime
) -> dict[tuple[str, NodeKey], int]:
    nodes: dict[tuple[str, NodeKey], tuple[str, str, bool, datetime, datetime]] = {}
    for (env, node), info in agg.services.items():
        first = _ns_to_dt(info.first_ns) if info.first_ns else now
        last = _ns_to_dt(info.last_ns) if info.last_ns else now
        nodes[(env, node)] = (
            info.version, _json(info.attributes), (env, node) in agg.ingress, first, last
        )
    for env, caller, callee, _bucket in agg.edges:
        for node in (caller, callee):
            if (env, node) not in nodes:
                nodes[(env, node)] = ("", "{}", False, now, now)
    for open_client in agg.open_clients:
        if open_client.target is not None and (open_client.env, open_client.target) not in nodes:
            nodes[(open_client.env, open_client.target)] = ("", "{}", False, now, now)
    for env, caller, callee in agg.broken:
        for node in (caller, callee):
            nodes.setdefault((env, node), ("", "{}", False, now, now))
    for (alias_env, _peer), node in agg.aliases.items():
        nodes.setdefault((alias_env, node), ("", "{}", False, now, now))
    keys = sorted(nodes)
    cursor.execute(
        """
        INSERT INTO runtime_service (environment_id, kind, namespace, name, version, attributes,
                                     ingress_candidate, first_seen, last_seen)
        SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[],
                             %s::jsonb[], %s::bool[], %s::timestamptz[], %s::timestamptz[])
        ON CONFLICT (environment_id, kind, namespace, name) DO UPDATE SET
            version = CASE WHEN EXCLUDED.version <> '' THEN EXCLUDED.version
                           ELSE runtime_service.version END,
            attributes = runtime_service.attributes || EXCLUDED.attributes,
            ingress_candidate = runtime_service.ingress_candidate OR EXCLUDED.ingress_candidate,
            first_seen = LEAST(runtime_service.first_seen, EXCLUDED.first_seen),
            last_seen = GREATEST(runtime_service.last_seen, EXCLUDED.last_seen)
        RETURNING id, environment_id, kind, namespace, name
        """,
        [
            [env_ids[env] for env, _ in keys],
            [node[0] for _, node in keys],
            [node[1] for _, node in keys],
            [node[2] for _, node in keys],
            [nodes[k][0] for k in keys],
            [nodes[k][1] for k in keys],
            [nodes[k][2] for k in keys],
            [nodes[k][3] for k in keys],
            [nodes[k][4] for k in keys],
        ],
    )
    env_names = {v: k for k, v in env_ids.items()}
    return {
        (env_names[env_id], (kind, ns, name)): node_id
        for node_id, env_id, kind, ns, name in cursor.fetchall()
    }


def _json(value: dict[str, str]) -> str:
    import orjson

    return orjson.dumps(value).decode()


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


def _edges_upsert(
    cursor: Any, *, edges: dict[tuple[int, int, int, int], _Edge], bucket_seconds: int
) -> None:
    if not edges:
        return
    keys = sorted(edges)
    cursor.execute(
        """
        INSERT INTO runtime_calledgebucket (environment_id, caller_id, callee_id, bucket_start,
                                            calls, errors, tls_calls, mtls_calls, hist, last_seen)
        SELECT env, caller, callee, to_timestamp(bucket * %s), calls, errors, tls, mtls,
               hist::bigint[], last_seen
          FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                      %s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::timestamptz[])
               AS u(env, caller, callee, bucket, calls, errors, tls, mtls, hist, last_seen)
        ON CONFLICT (caller_id, callee_id, bucket_start) DO UPDATE SET
            calls = runtime_calledgebucket.calls + EXCLUDED.calls,
            errors = runtime_calledgebucket.errors + EXCLUDED.errors,
            tls_calls = runtime_calledgebucket.tls_calls + EXCLUDED.tls_calls,
            mtls_calls = runtime_calledgebucket.mtls_calls + EXCLUDED.mtls_calls,
            hist = ARRAY(
                SELECT COALESCE(a, 0) + COALESCE(b, 0)
                  FROM unnest(runtime_calledgebucket.hist, EXCLUDED.hist)
                       WITH ORDINALITY AS h(a, b, i)
                 ORDER BY i),
            last_seen = GREATEST(runtime_calledgebucket.last_seen, EXCLUDED.last_seen)
        """,
        [
            bucket_seconds,
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [k[3] for k in keys],
            [edges[k].calls for k in keys],
            [edges[k].errors for k in keys],
            [edges[k].tls for k in keys],
            [edges[k].mtls for k in keys],
            [_hist_literal(edges[k].hist) for k in keys],
            [_ns_to_dt(edges[k].last_ns) for k in keys],
        ],
    )


def _libraries_upsert(
    cursor: Any, *, agg: Aggregate, env_ids: dict[str, int],
    node_ids: dict[tuple[str, NodeKey], int],
) -> None:
    if not agg.libraries:
        return
    rows = sorted(
        (node_ids[(env, service)], bucket, kind, name, version, count)
        for (env, service, bucket, kind, name, version), count in agg.libraries.items()
    )
    cursor.execute(
        """
        INSERT INTO runtime_librarybucket (service_id, bucket_start, kind, name, version, spans)
        SELECT service, to_timestamp(bucket * %s), kind, name, version, spans
          FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::text[],
                      %s::bigint[]) AS u(service, bucket, kind, name, version, spans)
        ON CONFLICT (service_id, bucket_start, kind, name, version) DO UPDATE SET
            spans = runtime_librarybucket.spans + EXCLUDED.spans
        """,
        [agg.bucket_seconds, *[list(col) for col in zip(*rows, strict=True)]],
    )


def _aliases_upsert(cursor: Any, *, aliases: dict[tuple[int, str], int]) -> None:
    if not aliases:
        return
    keys = sorted(aliases)
    cursor.execute(
        """
        INSERT INTO runtime_servicealias (environment_id, peer, service_id)
        SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[])
        ON CONFLICT (environment_id, peer) DO UPDATE SET service_id = EXCLUDED.service_id
        """,
        [[k[0] for k in keys], [k[1][:200] for k in keys], [aliases[k] for k in keys]],
    )


def _broken_upsert(
    *, agg: Aggregate, env_ids: dict[str, int], node_ids: dict[tuple[str, NodeKey], int],
    actor: Actor,
) -> None:
    broken_context_record(
        sightings=[
            BrokenSighting(
                caller_id=node_ids[(env, caller)],
                callee_id=node_ids[(env, callee)],
                count=broken.count,
                examples=list(broken.examples),
                first=_ns_to_dt(broken.first_ns),
                last=_ns_to_dt(broken.last_ns),
            )
            for (env, caller, callee), broken in sorted(agg.broken.items())
        ],
        actor=actor,
    )


def _json_any(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


def _samples_insert(
    cursor: Any, *, agg: Aggregate, env_ids: dict[str, int], received_at: datetime
) -> None:
    if not agg.samples:
        return
    with cursor.copy(
        "COPY runtime_tracesample (environment_id, trace_id, spans, received_at) FROM STDIN"
    ) as copy:
        for (env, trace_id), spans in sorted(agg.samples.items()):
            copy.write_row((env_ids[env], trace_id, _json_any(spans), received_at))


# --- the sweep ------------------------------------------------------------------------------


def traces_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Settle cross-request halves nobody matched within TRUSTRANK_TRACE_MATCH_SECONDS, and
    drop sampled traces past their retention.

    - A server span whose remote parent never arrived: an entry point (internet -> service),
      and the service becomes an ingress candidate.
    - A client span to a traced service that never produced a server span, while that
      service started new traces (entry calls) in the same bucket: lost trace context.
    Rows are consumed with DELETE … RETURNING, so a job matching them at the same moment
    and the sweep can never both count one.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.TRUSTRANK_TRACE_MATCH_SECONDS)
    bucket_seconds = settings.TRUSTRANK_TRACE_BUCKET_SECONDS
    entry = broken = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            DELETE FROM runtime_pendingserverspan WHERE received_at < %s
            RETURNING environment_id, service_id, bucket_start, duration_us, error, tls, mtls,
                      end_at
            """,
            [cutoff],
        )
        rows = cursor.fetchall()
        if rows:
            internet_ids = _internet_nodes(cursor, env_ids={r[0] for r in rows}, now=now)
            edges: dict[tuple[int, int, int, int], _Edge] = defaultdict(_Edge)
            services = set()
            for env_id, service_id, bucket_start, dur_us, error, tls, mtls, end_at in rows:
                bucket = int(bucket_start.timestamp()) // bucket_seconds
                edges[(env_id, internet_ids[env_id], service_id, bucket)].add(
                    dur_us=dur_us, error=error, tls=tls, mtls=mtls, end_ns=_dt_to_ns(end_at)
                )
                services.add(service_id)
            _edges_upsert(cursor, edges=edges, bucket_seconds=bucket_seconds)
            Service.objects.filter(pk__in=services, ingress_candidate=False).update(
                ingress_candidate=True
            )
            entry = len(rows)
        cursor.execute(
            """
            DELETE FROM runtime_openclientspan WHERE received_at < %s
            RETURNING environment_id, service_id, target_id, peer, bucket_start, start_at,
                      end_at, duration_us, error, tls, mtls, trace_id
            """,
            [cutoff],
        )
        expired = cursor.fetchall()
        external = _expired_clients_as_external(
            cursor, rows=[r for r in expired if r[2] is None and r[3]], now=now,
            bucket_seconds=bucket_seconds,
        )
        broken = _expired_clients_as_broken(
            cursor, rows=[r for r in expired if r[2] is not None and r[2] != r[1]], now=now
        )
        stale_resolved = broken_context_resolve_stale(now=now)
        retention = now - timedelta(days=settings.TRUSTRANK_TRACE_SAMPLE_RETENTION_DAYS)
        cursor.execute("DELETE FROM runtime_tracesample WHERE received_at < %s", [retention])
        samples_deleted = cursor.rowcount
    return {
        "entry_spans": entry,
        "external_calls": external,
        "broken_context": broken,
        "broken_context_resolved": stale_resolved,
        "samples_deleted": samples_deleted,
    }


def _expired_clients_as_external(
    cursor: Any, *, rows: list[tuple[Any, ...]], now: datetime, bucket_seconds: int
) -> int:
    """Calls nobody's server span claimed: the peer sends no telemetry, it is external."""
    if not rows:
        return 0
    keys = sorted({(r[0], r[3]) for r in rows})
    cursor.execute(
        """
        INSERT INTO runtime_service (environment_id, kind, namespace, name, version, attributes,
                                     ingress_candidate, first_seen, last_seen)
        SELECT env, 'external', '', peer, '', '{}'::jsonb, false, %s, %s
          FROM unnest(%s::bigint[], %s::text[]) AS u(env, peer)
        ON CONFLICT (environment_id, kind, namespace, name) DO UPDATE
            SET last_seen = EXCLUDED.last_seen
        RETURNING environment_id, name, id
        """,
        [now, now, [k[0] for k in keys], [k[1] for k in keys]],
    )
    ids = {(env_id, name): node_id for env_id, name, node_id in cursor.fetchall()}
    edges: dict[tuple[int, int, int, int], _Edge] = defaultdict(_Edge)
    for env_id, service_id, _t, peer, bucket_start, _s, end_at, dur_us, error, tls, mtls, _tid \
            in rows:
        bucket = int(bucket_start.timestamp()) // bucket_seconds
        edges[(env_id, service_id, ids[(env_id, peer)], bucket)].add(
            dur_us=dur_us, error=error, tls=tls, mtls=mtls, end_ns=_dt_to_ns(end_at)
        )
    _edges_upsert(cursor, edges=edges, bucket_seconds=bucket_seconds)
    return len(rows)


def _expired_clients_as_broken(cursor: Any, *, rows: list[tuple[Any, ...]], now: datetime) -> int:
    """A call to a traced service that never produced its server span, while that service
    started new traces (entry calls) in the same bucket: the context was lost on the hop."""
    if not rows:
        return 0
    cursor.execute(
        """
        SELECT b.callee_id, b.bucket_start
          FROM runtime_calledgebucket b JOIN runtime_service i ON i.id = b.caller_id
         WHERE i.kind = 'internet' AND b.callee_id = ANY(%s) AND b.bucket_start = ANY(%s)
        """,
        [sorted({r[2] for r in rows}), sorted({r[4] for r in rows})],
    )
    entries = set(cursor.fetchall())
    found: dict[tuple[int, int], list[tuple[Any, ...]]] = defaultdict(list)
    for _env_id, service_id, target_id, _peer, bucket_start, start_at, end_at, *_rest, trace_id \
            in rows:
        if (target_id, bucket_start) in entries:
            found[(service_id, target_id)].append((start_at, end_at, trace_id))
    return broken_context_record(
        sightings=[
            BrokenSighting(
                caller_id=caller_id,
                callee_id=callee_id,
                count=len(hits),
                examples=[{"caller_trace_id": h[2]} for h in hits[:5]],
                first=min(h[0] for h in hits),
                last=max(h[1] for h in hits),
            )
            for (caller_id, callee_id), hits in sorted(found.items())
        ],
        actor=Actor.system("trace sweep"),
    )


def _internet_nodes(cursor: Any, *, env_ids: Iterable[int], now: datetime) -> dict[int, int]:
    ids = sorted(env_ids)
    kind, namespace, name = INTERNET_NODE
    cursor.execute(
        """
        INSERT INTO runtime_service (environment_id, kind, namespace, name, version, attributes,
                                     ingress_candidate, first_seen, last_seen)
        SELECT e, %s, %s, %s, '', '{}'::jsonb, false, %s, %s FROM unnest(%s::bigint[]) AS e
        ON CONFLICT (environment_id, kind, namespace, name) DO UPDATE
            SET last_seen = EXCLUDED.last_seen
        RETURNING environment_id, id
        """,
        [kind, namespace, name, now, now, ids],
    )
    return dict(cursor.fetchall())


# --- operator actions -----------------------------------------------------------------------


def service_ingress_set(
    *, service: Service, principal: Principal, value: bool | None
) -> Service:
    """Confirm (True), deny (False) or return to the evidence (None) a service's ingress."""
    if not principal.can("triage", service.environment.team_id):
        raise IngressChangeDenied("changing ingress needs the 'triage' scope in this team")
    if service.kind != SERVICE and service.kind != EXTERNAL:
        raise IngressChangeDenied("the internet node cannot be marked as ingress")
    service.ingress_override = value
    user = principal.user if principal.user is not None and principal.user.is_authenticated \
        else None
    service.ingress_set_by = user
    service.ingress_set_at = timezone.now()
    service.save(update_fields=["ingress_override", "ingress_set_by", "ingress_set_at"])
    return service
