"""Which pods the internet reaches, by the cluster's own routing objects.

Entry points:
- a `Service` of type `LoadBalancer` or `NodePort` (a `ClusterIP` or `ExternalName` Service
  is not one by itself);
- every Service an `Ingress` rule or default backend names;
- every Service an `HTTPRoute` attached to a `Gateway` names in its `backendRefs` (a route
  whose parent Gateway is not in the snapshot still counts: the Gateway may live in a
  namespace the upload did not cover, and a missing object must never make a service look
  safer than it is).

A Service reaches the pods its selector matches in its namespace. Traces name a workload by
`service.name`, which is usually the pod's `app.kubernetes.io/name` or `app` label, its
`service.name` label, or its Deployment's name; so each entry point carries every such name
(and the Kubernetes Service's own name, which is often the same), and the wiring matches
traced services by those names. `route` says how the service is reached, for people.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from trustrank.parsers.kubernetes_network import (
    Backend,
    Gateway,
    HttpRoute,
    KubeIngress,
    KubeService,
)
from trustrank.parsers.kubernetes_objects import Pod
from trustrank.risk.cluster.findings import workload_key

EXPOSING_TYPES = ("LoadBalancer", "NodePort")
# Pod labels that usually carry the name a workload's traces report as service.name.
SERVICE_NAME_LABELS = ("app.kubernetes.io/name", "app", "service.name")


@dataclass(frozen=True, slots=True)
class EntryPoint:
    """Pods of `namespace` reached from outside; `names` the service names traces may give
    them; `kind` the object that exposes them (Service, Ingress, HTTPRoute)."""

    namespace: str
    names: tuple[str, ...]
    kind: str
    source: str  # namespace/name of that object
    route: str


def _selected(service: KubeService, pods: Iterable[Pod]) -> list[Pod]:
    if not service.selector:
        return []  # endpoints managed by hand: no pods to name
    return [
        pod for pod in pods
        if pod.namespace == service.namespace and pod.deleted is None
        and all(pod.labels.get(k) == v for k, v in service.selector.items())
    ]


def _names(service_name: str, pods: Iterable[Pod]) -> tuple[str, ...]:
    names = {service_name}
    for pod in pods:
        names.add(workload_key(pod).split("/", 2)[2])
        names.update(pod.labels[label] for label in SERVICE_NAME_LABELS if pod.labels.get(label))
    return tuple(sorted(names))


def _addresses(external: tuple[str, ...]) -> str:
    return f" at {', '.join(external[:3])}" if external else ""


def _backend_text(b: Backend) -> str:
    host = b.host or "*"
    return f"host {host}{b.path if b.path not in ('', '/') else ''} → Service {b.service}"


def entry_points_resolve(
    *,
    cluster: str,
    services: Iterable[KubeService],
    ingresses: Iterable[KubeIngress],
    gateways: Iterable[Gateway],
    routes: Iterable[HttpRoute],
    pods: Iterable[Pod],
) -> tuple[EntryPoint, ...]:
    pods_by_ns: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        pods_by_ns[pod.namespace].append(pod)
    by_key = {(s.namespace, s.name): s for s in services}

    def names_of(namespace: str, name: str) -> tuple[str, ...]:
        service = by_key.get((namespace, name))
        if service is None:
            return (name,)
        return _names(name, _selected(service, pods_by_ns[namespace]))

    found: list[EntryPoint] = []
    for s in sorted(by_key.values(), key=lambda s: (s.namespace, s.name)):
        if s.type not in EXPOSING_TYPES:
            continue
        ports = f", node ports {', '.join(map(str, s.node_ports))}" if s.node_ports else ""
        found.append(EntryPoint(
            namespace=s.namespace, names=names_of(s.namespace, s.name), kind="Service",
            source=f"{s.namespace}/{s.name}",
            route=(f"Kubernetes Service {s.namespace}/{s.name} type {s.type}"
                   f"{_addresses(s.external)}{ports} (cluster {cluster})"),
        ))
    for ing in sorted(ingresses, key=lambda i: (i.namespace, i.name)):
        for b in ing.backends:
            found.append(EntryPoint(
                namespace=b.namespace, names=names_of(b.namespace, b.service), kind="Ingress",
                source=f"{ing.namespace}/{ing.name}",
                route=(f"Ingress {ing.namespace}/{ing.name} {_backend_text(b)}"
                       f"{_addresses(ing.external)} (cluster {cluster})"),
            ))
    known_gateways = {(g.namespace, g.name): g for g in gateways}
    for route in sorted(routes, key=lambda r: (r.namespace, r.name)):
        if not route.parents:
            continue
        parent_ns, parent = route.parents[0]
        gateway = known_gateways.get((parent_ns, parent))
        via = f"Gateway {parent_ns}/{parent}"
        if gateway is not None:
            via += (f" ({gateway.gateway_class})" if gateway.gateway_class else "")
            via += _addresses(gateway.external)
        for b in route.backends:
            found.append(EntryPoint(
                namespace=b.namespace, names=names_of(b.namespace, b.service), kind="HTTPRoute",
                source=f"{route.namespace}/{route.name}",
                route=(f"HTTPRoute {route.namespace}/{route.name} via {via} "
                       f"{_backend_text(b)} (cluster {cluster})"),
            ))
    return tuple(found)
