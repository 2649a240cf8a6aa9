"""How traffic reaches pods: `Service`, `Ingress` (networking.k8s.io/v1) and Gateway API
`Gateway` / `HTTPRoute` (gateway.networking.k8s.io/v1) objects, as `kubectl get -o json`
prints them, read into frozen dataclasses. `kubernetes_parse` calls these readers for those
kinds; which of them make an entry point from the internet is decided in
`trustrank.risk.cluster.entry_points`.

Only what routing needs is read: a Service's type, selector, ports and external addresses;
an Ingress's rules (host, path → backend Service) and default backend; a Gateway's class,
listeners and addresses; an HTTPRoute's parent Gateways, hostnames and Service backends.
A field of the wrong JSON type raises `KubernetesError` naming the object and field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trustrank.parsers.errors import ParserError


class NetworkObjectError(ParserError):
    """A routing object with a field of the wrong type; the message names it."""


@dataclass(frozen=True, slots=True)
class KubeService:
    name: str
    namespace: str
    type: str  # ClusterIP (default), NodePort, LoadBalancer, ExternalName
    selector: Mapping[str, str]
    ports: tuple[int, ...] = ()
    node_ports: tuple[int, ...] = ()
    # status.loadBalancer.ingress[].ip/hostname and spec.externalIPs.
    external: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Backend:
    """One route to a Service: `host` "" means any host; `port` the number or name."""

    host: str
    path: str
    service: str
    namespace: str
    port: str = ""


@dataclass(frozen=True, slots=True)
class KubeIngress:
    name: str
    namespace: str
    ingress_class: str
    backends: tuple[Backend, ...]
    external: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Gateway:
    name: str
    namespace: str
    gateway_class: str
    listeners: tuple[str, ...] = ()  # "https:443 shop.example.com"
    external: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HttpRoute:
    name: str
    namespace: str
    parents: tuple[tuple[str, str], ...]  # (namespace, name) of Gateways
    hostnames: tuple[str, ...]
    backends: tuple[Backend, ...]


def _where(item: dict[str, Any], kind: str) -> str:
    meta = item.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return f"{kind} {meta.get('namespace') or ''}/{meta.get('name') or '?'}"


def _obj(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NetworkObjectError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NetworkObjectError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _str(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise NetworkObjectError(f"{where}: expected a string, got {value!r}")
    return value


def _port(value: object, where: str) -> str:
    """A port by number or by name, as text ("" when absent)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise NetworkObjectError(f"{where}: port {value!r} is neither a number nor a name")
    return str(value)


def _meta(item: dict[str, Any], where: str) -> tuple[str, str]:
    meta = _obj(item.get("metadata"), f"{where} metadata")
    name = _str(meta.get("name"), f"{where} metadata.name")
    if not name:
        raise NetworkObjectError(f"{where}: metadata.name is missing")
    return name, _str(meta.get("namespace"), f"{where} metadata.namespace") or "default"


def _lb_addresses(status: dict[str, Any], where: str) -> list[str]:
    lb = _obj(status.get("loadBalancer"), f"{where} status.loadBalancer")
    out = []
    for raw in _list(lb.get("ingress"), f"{where} status.loadBalancer.ingress"):
        entry = _obj(raw, f"{where} status.loadBalancer.ingress[]")
        address = _str(entry.get("ip"), where) or _str(entry.get("hostname"), where)
        if address:
            out.append(address)
    return out


def service_read(item: dict[str, Any]) -> KubeService:
    where = _where(item, "Service")
    name, namespace = _meta(item, where)
    spec = _obj(item.get("spec"), f"{where} spec")
    ports: list[int] = []
    node_ports: list[int] = []
    for raw in _list(spec.get("ports"), f"{where} spec.ports"):
        port = _obj(raw, f"{where} spec.ports[]")
        for key, into in (("port", ports), ("nodePort", node_ports)):
            value = port.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise NetworkObjectError(
                        f"{where}: spec.ports[].{key} {value!r} is not a number"
                    )
                into.append(value)
    external = [
        _str(a, f"{where} spec.externalIPs") for a in _list(spec.get("externalIPs"), where)
    ]
    external += _lb_addresses(_obj(item.get("status"), f"{where} status"), where)
    selector = _obj(spec.get("selector"), f"{where} spec.selector")
    return KubeService(
        name=name, namespace=namespace, type=_str(spec.get("type"), where) or "ClusterIP",
        selector={str(k): str(v) for k, v in selector.items()},
        ports=tuple(ports), node_ports=tuple(node_ports), external=tuple(external),
    )


def _ingress_backend(raw: object, where: str, *, host: str, path: str,
                     namespace: str) -> Backend | None:
    backend = _obj(raw, where)
    service = _obj(backend.get("service"), f"{where}.service")
    name = _str(service.get("name"), f"{where}.service.name")
    if not name:
        return None  # a `resource` backend (a bucket, say): no pods behind it
    port = _obj(service.get("port"), f"{where}.service.port")
    return Backend(host=host, path=path, service=name, namespace=namespace,
                   port=_port(port.get("number", port.get("name")), f"{where}.service.port"))


def ingress_read(item: dict[str, Any]) -> KubeIngress:
    where = _where(item, "Ingress")
    name, namespace = _meta(item, where)
    spec = _obj(item.get("spec"), f"{where} spec")
    backends: list[Backend] = []
    if spec.get("defaultBackend") is not None:
        found = _ingress_backend(spec["defaultBackend"], f"{where} spec.defaultBackend",
                                 host="", path="", namespace=namespace)
        if found is not None:
            backends.append(found)
    for i, raw in enumerate(_list(spec.get("rules"), f"{where} spec.rules")):
        rule = _obj(raw, f"{where} spec.rules[{i}]")
        host = _str(rule.get("host"), f"{where} spec.rules[{i}].host")
        http = _obj(rule.get("http"), f"{where} spec.rules[{i}].http")
        for j, raw_path in enumerate(_list(http.get("paths"), f"{where} spec.rules[{i}].paths")):
            at = f"{where} spec.rules[{i}].http.paths[{j}]"
            entry = _obj(raw_path, at)
            found = _ingress_backend(entry.get("backend"), f"{at}.backend", host=host,
                                     path=_str(entry.get("path"), f"{at}.path"),
                                     namespace=namespace)
            if found is not None:
                backends.append(found)
    return KubeIngress(
        name=name, namespace=namespace,
        ingress_class=_str(spec.get("ingressClassName"), f"{where} spec.ingressClassName"),
        backends=tuple(backends),
        external=tuple(_lb_addresses(_obj(item.get("status"), f"{where} status"), where)),
    )


def gateway_read(item: dict[str, Any]) -> Gateway:
    where = _where(item, "Gateway")
    name, namespace = _meta(item, where)
    spec = _obj(item.get("spec"), f"{where} spec")
    listeners = []
    for raw in _list(spec.get("listeners"), f"{where} spec.listeners"):
        listener = _obj(raw, f"{where} spec.listeners[]")
        text = f"{_str(listener.get('protocol'), where).lower()}:"
        text += _port(listener.get("port"), f"{where} spec.listeners[].port")
        hostname = _str(listener.get("hostname"), f"{where} spec.listeners[].hostname")
        listeners.append(f"{text} {hostname}".strip())
    addresses = [
        _str(_obj(a, f"{where} status.addresses[]").get("value"), where)
        for a in _list(_obj(item.get("status"), where).get("addresses"), where)
    ]
    return Gateway(
        name=name, namespace=namespace,
        gateway_class=_str(spec.get("gatewayClassName"), f"{where} spec.gatewayClassName"),
        listeners=tuple(listeners), external=tuple(a for a in addresses if a),
    )


def http_route_read(item: dict[str, Any]) -> HttpRoute:
    where = _where(item, "HTTPRoute")
    name, namespace = _meta(item, where)
    spec = _obj(item.get("spec"), f"{where} spec")
    parents = []
    for raw in _list(spec.get("parentRefs"), f"{where} spec.parentRefs"):
        ref = _obj(raw, f"{where} spec.parentRefs[]")
        if _str(ref.get("kind"), where) not in ("", "Gateway"):
            continue
        parents.append((_str(ref.get("namespace"), where) or namespace,
                        _str(ref.get("name"), f"{where} spec.parentRefs[].name")))
    hostnames = tuple(
        _str(h, f"{where} spec.hostnames") for h in _list(spec.get("hostnames"), where)
    )
    backends = []
    for i, raw in enumerate(_list(spec.get("rules"), f"{where} spec.rules")):
        rule = _obj(raw, f"{where} spec.rules[{i}]")
        paths = [
            _str(_obj(_obj(m, where).get("path"), where).get("value"), where)
            for m in _list(rule.get("matches"), f"{where} spec.rules[{i}].matches")
        ] or [""]
        for raw_ref in _list(rule.get("backendRefs"), f"{where} spec.rules[{i}].backendRefs"):
            ref = _obj(raw_ref, f"{where} spec.rules[{i}].backendRefs[]")
            if _str(ref.get("kind"), where) not in ("", "Service"):
                continue
            service = _str(ref.get("name"), f"{where} spec.rules[{i}].backendRefs[].name")
            if service:
                backends.append(Backend(
                    host=",".join(hostnames), path=paths[0], service=service,
                    namespace=_str(ref.get("namespace"), where) or namespace,
                    port=_port(ref.get("port"), f"{where} spec.rules[{i}].backendRefs[].port"),
                ))
    return HttpRoute(name=name, namespace=namespace, parents=tuple(parents),
                     hostnames=hostnames, backends=tuple(backends))


READERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Service": service_read,
    "Ingress": ingress_read,
    "Gateway": gateway_read,
    "HTTPRoute": http_route_read,
}
# Stored key columns (cluster.ClusterNetworkObject): longer values are refused, not cut.
KEY_LIMITS: dict[str, tuple[tuple[str, int], ...]] = {
    kind: (("name", 253), ("namespace", 253)) for kind in READERS
}
