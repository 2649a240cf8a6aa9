"""How the internet reaches a team's services, read for a ranking run: the Kubernetes
entry points (`cluster.ClusterEntryPoint`) and, for services a deployment declares that
send no traces, the operator's ingress mark held on the deployment.

A declared service that sends no traces has no Service row, so it is no node of the graph
unless something says how it is reached: a mark or a route adds it (`declared_services`),
and the graph then decides its exposure as for any service (the engine still knows it
sends no traces: `risk.context.ContextIndex.untraced_service`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from trustrank.cluster.selectors import Entry, routes_for
from trustrank.risk import inputs as ri
from trustrank.runtime.services.ingress import ingress_override_text

# Deployments of services with no Service row of their own (by name, as the ranking keys
# services): declared, never traced. The namespace-less declaration first.
_DECLARED_SQL = """
SELECT e.name, d.service_name, d.namespace, d.ingress_override, d.ingress_set_by_label,
       d.ingress_set_via, d.ingress_set_at
  FROM runtime_deployment d
  JOIN runtime_environment e ON e.id = d.environment_id
 WHERE e.team_id = %s
   AND NOT EXISTS (SELECT 1 FROM runtime_service s
                    WHERE s.environment_id = d.environment_id AND s.kind = 'service'
                      AND s.name = d.service_name)
 ORDER BY e.name, d.service_name, d.namespace
"""

DeclaredRow = tuple[str, str, str, bool | None, str, str, datetime | None]


def declared_rows(team_id: int) -> tuple[DeclaredRow, ...]:
    with connection.cursor() as cur:
        cur.execute(_DECLARED_SQL, [team_id])
        return tuple(cur.fetchall())


def declared_services(
    rows: Sequence[DeclaredRow], *, entries: Sequence[Entry],
    identities: dict[tuple[str, str], tuple[float, str]],
) -> list[ri.Service]:
    """Graph records for the declared untraced services a mark or a route reaches. No
    resource attributes say where such a service runs, so a route in any cluster counts."""
    marked: dict[tuple[str, str], DeclaredRow] = {}
    for row in rows:
        key = (row[0], row[1])
        # Several namespaces declare one name: the ranking knows one service; a mark wins.
        if key not in marked or (marked[key][3] is None and row[3] is not None):
            marked[key] = row
    out = []
    for (env, name), (_, _, namespace, override, by, via, at) in marked.items():
        routes = routes_for(entries, name=name, cluster=None, namespace=None)
        if override is None and not routes:
            continue  # nothing says how it is reached: exposure unknown, no graph node
        strength, spiffe = identities.get((env, name), (None, ""))
        detail: Any = (ingress_override_text(value=override, by=by, via=via, at=at)
                       if override is not None else "; ".join(routes))
        out.append(ri.Service(
            environment=env, name=name, namespace=namespace, ingress_candidate=bool(routes),
            ingress_override=override, ingress_detail=detail,
            identity_strength=strength, identity=spiffe,
        ))
    return out
