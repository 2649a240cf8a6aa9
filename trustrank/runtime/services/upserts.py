"""Set-based writes shared by aggregation and the sweep: environments, nodes, edges,
libraries, aliases, broken contexts and span samples."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trustrank.findings.services.audit import Actor
from trustrank.runtime import engine, engine_histograms
from trustrank.runtime.broken_context import BrokenSighting, broken_context_record
from trustrank.runtime.engine import Aggregate, NodeKey


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
    return "{" + ",".join(str(v) for v in engine_histograms.hist_to_list(hist or {})) + "}"


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


def _edges_insert(
    cursor: Any, *, edges: dict[tuple[int, int, int, int], _Edge], bucket_seconds: int
) -> None:
    """Append this load's partial rows (models.CallEdgeBucket): no row of another load is
    touched, so concurrent loads never wait on each other's row locks here."""
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


def _libraries_insert(
    cursor: Any, *, agg: Aggregate, env_ids: dict[str, int],
    node_ids: dict[tuple[str, NodeKey], int],
) -> None:
    """Append this load's partial rows (models.LibraryBucket)."""
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

