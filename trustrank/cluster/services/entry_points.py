"""Routing objects of a cluster stored, and its entry points from the internet recomputed.

Called by `objects_load` inside its transaction (the cluster row is locked). A snapshot that
holds Services (Ingresses, Gateways, HTTPRoutes) is the cluster's whole list of that kind:
stored objects of the kind missing from it are removed. After an upload that holds pods or
any routing kind, the entry points are computed again from what is stored
(`risk.cluster.entry_points`); when they changed, the team's evidence changed and ranking
runs again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import orjson
from django.db.models import Q

from trustrank.cluster.models import Cluster, ClusterEntryPoint, ClusterNetworkObject
from trustrank.findings.services.evidence import evidence_change_record
from trustrank.parsers.kubernetes_network import (
    Backend,
    Gateway,
    HttpRoute,
    KubeIngress,
    KubeService,
)
from trustrank.parsers.kubernetes_objects import ClusterSnapshot, Pod
from trustrank.risk.cluster.entry_points import entry_points_resolve


def _service(state: dict[str, Any]) -> KubeService:
    return KubeService(**{**state, "ports": tuple(state["ports"]),
                          "node_ports": tuple(state["node_ports"]),
                          "external": tuple(state["external"])})


def _backends(items: Iterable[dict[str, Any]]) -> tuple[Backend, ...]:
    return tuple(Backend(**b) for b in items)


def _ingress(state: dict[str, Any]) -> KubeIngress:
    return KubeIngress(**{**state, "backends": _backends(state["backends"]),
                          "external": tuple(state["external"])})


def _gateway(state: dict[str, Any]) -> Gateway:
    return Gateway(**{**state, "listeners": tuple(state["listeners"]),
                      "external": tuple(state["external"])})


def _route(state: dict[str, Any]) -> HttpRoute:
    return HttpRoute(**{**state, "parents": tuple(tuple(p) for p in state["parents"]),
                        "hostnames": tuple(state["hostnames"]),
                        "backends": _backends(state["backends"])})


_FROM_STATE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Service": _service, "Ingress": _ingress, "Gateway": _gateway, "HTTPRoute": _route,
}


def _kinds(snapshot: ClusterSnapshot) -> dict[str, tuple[Any, ...]]:
    return {
        "Service": snapshot.services, "Ingress": snapshot.ingresses,
        "Gateway": snapshot.gateways, "HTTPRoute": snapshot.http_routes,
    }


def network_objects_load(
    *, cluster: Cluster, snapshot: ClusterSnapshot, pods: Callable[[], Iterable[Pod]],
    at: datetime,
) -> int:
    """Store the snapshot's routing objects and recompute the cluster's entry points (when
    the snapshot holds pods or routing objects). `pods` gives the live pods as stored.
    Returns the number of entry points."""
    kinds = {kind: items for kind, items in _kinds(snapshot).items() if items}
    for kind, items in kinds.items():
        unique = {(o.namespace, o.name): o for o in items}
        ClusterNetworkObject.objects.bulk_create(
            [
                ClusterNetworkObject(cluster=cluster, kind=kind, namespace=ns, name=name,
                                     state=orjson.loads(orjson.dumps(o)), last_seen=at)
                for (ns, name), o in unique.items()
            ],
            update_conflicts=True, unique_fields=["cluster", "kind", "namespace", "name"],
            update_fields=["state", "last_seen"],
        )
        keep = Q()
        for ns, name in unique:
            keep |= Q(namespace=ns, name=name)
        ClusterNetworkObject.objects.filter(cluster=cluster, kind=kind).exclude(keep).delete()
    if not kinds and not snapshot.pods:
        return ClusterEntryPoint.objects.filter(cluster=cluster).count()
    return entry_points_refresh(cluster=cluster, pods=pods())


def entry_points_refresh(*, cluster: Cluster, pods: Iterable[Pod]) -> int:
    stored: dict[str, list[Any]] = {kind: [] for kind in _FROM_STATE}
    for kind, state in ClusterNetworkObject.objects.filter(cluster=cluster).values_list(
        "kind", "state"
    ):
        if kind in stored:
            stored[kind].append(_FROM_STATE[kind](state))
    found = entry_points_resolve(
        cluster=cluster.name, services=stored["Service"], ingresses=stored["Ingress"],
        gateways=stored["Gateway"], routes=stored["HTTPRoute"], pods=pods,
    )
    rows = [(e.namespace, list(e.names), e.kind, e.source[:510], e.route) for e in found]
    before = list(
        ClusterEntryPoint.objects.filter(cluster=cluster)
        .order_by("id").values_list("namespace", "names", "kind", "source", "route")
    )
    if [tuple(r) for r in before] != [tuple(r) for r in rows]:
        ClusterEntryPoint.objects.filter(cluster=cluster).delete()
        ClusterEntryPoint.objects.bulk_create(
            [ClusterEntryPoint(cluster=cluster, namespace=ns, names=names, kind=kind,
                               source=source, route=route)
             for ns, names, kind, source, route in rows]
        )
        # Which services the internet reaches changed: rank the team's findings again.
        evidence_change_record(team_id=cluster.team_id,
                               what=f"entry points of cluster {cluster.name}")
    return len(rows)
