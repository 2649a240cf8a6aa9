"""The periodic sweep: client calls whose server half never came become external or
broken-context edges."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.findings.services.audit import Actor
from trustrank.runtime.broken_context import (
    BrokenSighting,
    broken_context_record,
    broken_context_resolve_stale,
)
from trustrank.runtime.engine import INTERNET_NODE
from trustrank.runtime.models import Service
from trustrank.runtime.services.compaction import COMPACT_AFTER, call_graph_compact
from trustrank.runtime.services.upserts import _dt_to_ns, _Edge, _edges_insert


def traces_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Settle cross-request halves nobody matched within TRUSTRANK_TRACE_MATCH_SECONDS, and
    drop sampled traces past their retention; then fold the partial call edge and
    library rows of finished buckets (`compaction.call_graph_compact`).

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
            _edges_insert(cursor, edges=edges, bucket_seconds=bucket_seconds)
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
    # Its own transaction: the fold must not hold the sweep's rows (or the reverse).
    folded = call_graph_compact(before=now - COMPACT_AFTER)
    return {
        "entry_spans": entry,
        "external_calls": external,
        "broken_context": broken,
        "broken_context_resolved": stale_resolved,
        "samples_deleted": samples_deleted,
        **folded,
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
    _edges_insert(cursor, edges=edges, bucket_seconds=bucket_seconds)
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

