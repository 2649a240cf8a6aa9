"""`kubectl get pods,nodes,events,priorityclasses,services,ingresses,gateways,httproutes -A
-o json` -> `ClusterSnapshot` (the routing kinds are read by `kubernetes_network`).

Accepted bodies: a `List` (what kubectl prints for several kinds), one kind's list
(`PodList`, `NodeList`, `EventList`, `PriorityClassList`; their items carry no `kind`, so
it comes from the list's), or one object (`Pod`, `Node`, …). Other kinds in a `List` are
counted in `ignored` and skipped; a body that is not JSON, not an object, or has a bad
quantity, time or field type raises `KubernetesError` naming the object. An object that
reads well but holds a value storage cannot keep (a NUL in any string, which PostgreSQL
text and jsonb cannot hold, or a name, namespace or other key field longer than its
column) is left out and named in `ClusterSnapshot.rejected`; the others are kept.

GPU requests are read as `kubernetes_objects` describes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

import orjson

from trustrank.parsers import kubernetes_network as network
from trustrank.parsers.errors import ParserError
from trustrank.parsers.kubernetes_objects import (
    ClusterSnapshot,
    Condition,
    Event,
    GpuRequest,
    Node,
    Owner,
    Pod,
    PriorityClass,
    RejectedObject,
    quantity_parse,
)


class KubernetesError(ParserError):
    """The body is not usable Kubernetes list JSON; the message names the object."""


_MIG = re.compile(r"^nvidia\.com/mig-(\d+)g\.\d+gb$")




# --- reading -----------------------------------------------------------------------------

def _time(value: object, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise KubernetesError(f"{where}: time {value!r} is not a string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise KubernetesError(f"{where}: bad time {value!r}") from exc
    if parsed.tzinfo is None:
        raise KubernetesError(f"{where}: time {value!r} has no time zone")
    return parsed


def _obj(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubernetesError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise KubernetesError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _str(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise KubernetesError(f"{where}: expected a string, got {value!r}")
    return value


def _strmap(value: object, where: str) -> dict[str, str]:
    mapping = _obj(value, where)
    return {str(k): str(v) for k, v in mapping.items()}


def _int(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise KubernetesError(f"{where}: expected an integer, got {value!r}")
    return value


def _quantities(resources: dict[str, Any], where: str) -> dict[str, float]:
    out = {}
    for name, raw in resources.items():
        try:
            out[str(name)] = quantity_parse(raw)
        except ValueError as exc:
            raise KubernetesError(f"{where}: bad quantity {raw!r} for {name}") from exc
    return out


def _gpu(resources: Mapping[str, float]) -> GpuRequest:
    mig = 0.0
    for name, amount in resources.items():
        match = _MIG.match(name)
        if match:
            mig += int(match.group(1)) * amount
    shared = resources.get("nvidia.com/gpu.shared", 0.0)
    memory = (
        resources.get("nvidia.com/gpumem", 0.0) + resources.get("aliyun.com/gpu-mem", 0.0) * 1024
    )
    cores = resources.get("nvidia.com/gpucores", 0.0)
    whole = resources.get("nvidia.com/gpu", 0.0)
    if memory and not (whole or cores or mig or shared):
        # Memory-only sharing: one share of a GPU whose size the pod does not state.
        shared = 1.0
    return GpuRequest(
        whole=whole, shared=shared, mig_slices=mig, cores_percent=cores, memory_mib=memory
    )


def _add(a: dict[str, float], b: Mapping[str, float]) -> None:
    for key, value in b.items():
        a[key] = a.get(key, 0.0) + value


def _effective(app: list[dict[str, float]], init: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for item in app:
        _add(total, item)
    for item in init:
        for key, value in item.items():
            total[key] = max(total.get(key, 0.0), value)
    return total


def _conditions(value: object, where: str) -> tuple[Condition, ...]:
    out = []
    for index, raw in enumerate(_list(value, where)):
        item = _obj(raw, f"{where}[{index}]")
        out.append(Condition(
            type=_str(item.get("type"), where), status=_str(item.get("status"), where),
            last_transition=_time(item.get("lastTransitionTime"), f"{where} {item.get('type')}"),
            reason=_str(item.get("reason"), where), message=_str(item.get("message"), where),
        ))
    return tuple(out)


def _derived_qos(containers: list[tuple[dict[str, float], dict[str, float]]]) -> str:
    """Kubernetes' rule, for a body without status.qosClass."""
    if all(not req and not lim for req, lim in containers):
        return "BestEffort"
    for req, lim in containers:
        for resource in ("cpu", "memory"):
            if resource not in lim or req.get(resource, lim[resource]) != lim[resource]:
                return "Burstable"
    return "Guaranteed"


def _pod(item: dict[str, Any]) -> Pod:
    meta = _obj(item.get("metadata"), "Pod")
    name = _str(meta.get("name"), "Pod")
    namespace = _str(meta.get("namespace"), f"Pod {name}")
    where = f"Pod {namespace}/{name}"
    spec = _obj(item.get("spec"), where)
    status = _obj(item.get("status"), where)
    annotations = _strmap(meta.get("annotations"), f"{where} annotations")
    requests_app: list[dict[str, float]] = []
    limits_app: list[dict[str, float]] = []
    requests_init: list[dict[str, float]] = []
    limits_init: list[dict[str, float]] = []
    qos_input = []
    names = []
    images = []
    for group, reqs, lims in (
        ("containers", requests_app, limits_app),
        ("initContainers", requests_init, limits_init),
    ):
        for index, raw in enumerate(_list(spec.get(group), f"{where} {group}")):
            container = _obj(raw, f"{where} {group}[{index}]")
            cname = _str(container.get("name"), where)
            cwhere = f"{where} container {cname}"
            resources = _obj(container.get("resources"), cwhere)
            request = _quantities(_obj(resources.get("requests"), cwhere), cwhere)
            limit = _quantities(_obj(resources.get("limits"), cwhere), cwhere)
            # Extended resources: a limit alone implies the same request.
            for key, value in limit.items():
                if "/" in key:
                    request.setdefault(key, value)
            reqs.append(request)
            lims.append(limit)
            qos_input.append((request, limit))
            if group == "containers":
                names.append(cname)
                images.append(_str(container.get("image"), cwhere))
    requests = _effective(requests_app, requests_init)
    limits = _effective(limits_app, limits_init)
    gpu_request, gpu_limit = _gpu(requests), _gpu(limits)
    fraction_raw = annotations.get("gpu-fraction")
    memory_raw = annotations.get("gpu-memory")
    try:
        fraction = float(fraction_raw) if fraction_raw else 0.0
        memory = quantity_parse(memory_raw) if memory_raw else 0.0
    except ValueError as exc:
        raise KubernetesError(f"{where}: bad gpu-fraction or gpu-memory annotation") from exc
    if not 0.0 <= fraction <= 1.0:
        raise KubernetesError(f"{where}: gpu-fraction {fraction_raw!r} is not within 0..1")
    if fraction or memory:
        extra = {"fraction": fraction, "memory_mib": gpu_request.memory_mib + memory}
        if memory and not gpu_request.gpus and not fraction:
            extra["shared"] = max(gpu_request.shared, 1.0)
        gpu_request = _replace_gpu(gpu_request, **extra)
        gpu_limit = _replace_gpu(gpu_limit, **extra)
    owners = _list(meta.get("ownerReferences"), f"{where} ownerReferences")
    owner = None
    for index, raw in enumerate(owners):
        ref = _obj(raw, f"{where} ownerReferences[{index}]")
        candidate = Owner(
            kind=_str(ref.get("kind"), where), name=_str(ref.get("name"), where),
            uid=_str(ref.get("uid"), where),
        )
        if owner is None or ref.get("controller"):
            owner = candidate
    return Pod(
        name=name, namespace=namespace, uid=_str(meta.get("uid"), where),
        node=_str(spec.get("nodeName"), where), phase=_str(status.get("phase"), where),
        qos_class=_str(status.get("qosClass"), where) or _derived_qos(qos_input),
        priority_class=_str(spec.get("priorityClassName"), where),
        priority=_int(spec.get("priority"), f"{where} priority"),
        created=_time(meta.get("creationTimestamp"), where),
        started=_time(status.get("startTime"), where),
        deleted=_time(meta.get("deletionTimestamp"), where),
        owner=owner, containers=tuple(names),
        labels=_strmap(meta.get("labels"), f"{where} labels"), annotations=annotations,
        conditions=_conditions(status.get("conditions"), f"{where} conditions"),
        gpu_request=gpu_request, gpu_limit=gpu_limit,
        cpu_request=requests.get("cpu", 0.0), memory_request=requests.get("memory", 0.0),
        nominated_node=_str(status.get("nominatedNodeName"), where),
        images=tuple(images),
    )


def _replace_gpu(gpu: GpuRequest, **changes: float) -> GpuRequest:
    values = {
        "whole": gpu.whole, "shared": gpu.shared, "mig_slices": gpu.mig_slices,
        "cores_percent": gpu.cores_percent, "memory_mib": gpu.memory_mib,
        "fraction": gpu.fraction,
    }
    values.update(changes)
    return GpuRequest(**values)


def _gpu_count(resources: Mapping[str, float]) -> float:
    gpu = _gpu(resources)
    return gpu.whole + gpu.shared + gpu.mig_slices / 7


def _node(item: dict[str, Any]) -> Node:
    meta = _obj(item.get("metadata"), "Node")
    name = _str(meta.get("name"), "Node")
    where = f"Node {name}"
    spec = _obj(item.get("spec"), where)
    status = _obj(item.get("status"), where)
    labels = _strmap(meta.get("labels"), f"{where} labels")
    capacity = _quantities(_obj(status.get("capacity"), where), f"{where} capacity")
    allocatable = _quantities(_obj(status.get("allocatable"), where), f"{where} allocatable")
    try:
        gpu_memory = float(labels.get("nvidia.com/gpu.memory", "0") or 0)
    except ValueError as exc:
        raise KubernetesError(f"{where}: bad nvidia.com/gpu.memory label") from exc
    return Node(
        name=name, uid=_str(meta.get("uid"), where), labels=labels,
        capacity_gpus=_gpu_count(capacity), allocatable_gpus=_gpu_count(allocatable),
        allocatable_cpu=allocatable.get("cpu", 0.0),
        allocatable_memory=allocatable.get("memory", 0.0),
        gpu_product=labels.get("nvidia.com/gpu.product", ""), gpu_memory_mib=gpu_memory,
        unschedulable=bool(spec.get("unschedulable")),
        conditions=_conditions(status.get("conditions"), f"{where} conditions"),
        created=_time(meta.get("creationTimestamp"), where),
    )


def _event(item: dict[str, Any]) -> Event:
    meta = _obj(item.get("metadata"), "Event")
    name = _str(meta.get("name"), "Event")
    namespace = _str(meta.get("namespace"), f"Event {name}")
    where = f"Event {namespace}/{name}"
    # core/v1 names the object `involvedObject`; events.k8s.io/v1 names it `regarding`.
    involved = _obj(item.get("involvedObject") or item.get("regarding"), where)
    source = _obj(item.get("source"), where)
    series = _obj(item.get("series"), where)
    first = _time(item.get("firstTimestamp") or item.get("deprecatedFirstTimestamp"), where)
    last = _time(
        item.get("lastTimestamp") or item.get("deprecatedLastTimestamp")
        or (series.get("lastObservedTime") if series else None), where,
    )
    event_time = _time(item.get("eventTime"), where)
    count = _int(item.get("count") or item.get("deprecatedCount") or series.get("count"), where)
    return Event(
        name=name, namespace=namespace, reason=_str(item.get("reason"), where),
        type=_str(item.get("type"), where),
        message=_str(item.get("message") or item.get("note"), where),
        object_kind=_str(involved.get("kind"), where),
        object_name=_str(involved.get("name"), where),
        object_namespace=_str(involved.get("namespace"), where),
        object_uid=_str(involved.get("uid"), where),
        first_seen=first or event_time, last_seen=last or event_time or first,
        count=count or 1,
        source=_str(source.get("component") or item.get("reportingComponent")
                    or item.get("reportingController"), where),
    )


def _priority_class(item: dict[str, Any]) -> PriorityClass:
    meta = _obj(item.get("metadata"), "PriorityClass")
    name = _str(meta.get("name"), "PriorityClass")
    where = f"PriorityClass {name}"
    value = _int(item.get("value"), where)
    if value is None:
        raise KubernetesError(f"{where}: value is missing")
    return PriorityClass(
        name=name, value=value,
        preemption_policy=_str(item.get("preemptionPolicy"), where) or "PreemptLowerPriority",
        global_default=bool(item.get("globalDefault")),
        description=_str(item.get("description"), where),
    )


def _network(reader: Any) -> Any:
    def read(item: dict[str, Any]) -> Any:
        try:
            return reader(item)
        except network.NetworkObjectError as exc:
            raise KubernetesError(str(exc)) from exc
    return read


_READERS = {
    "Pod": _pod, "Node": _node, "Event": _event, "PriorityClass": _priority_class,
    **{kind: _network(reader) for kind, reader in network.READERS.items()},
}

# The stored columns (cluster models) that are not cut to length when stored.
_KEY_LIMITS: dict[str, tuple[tuple[str, int], ...]] = {
    "Pod": (("name", 253), ("namespace", 253), ("node", 253), ("priority_class", 253),
            ("phase", 20), ("qos_class", 20)),
    "Node": (("name", 253),),
    "Event": (),
    "PriorityClass": (("name", 253),),
    **network.KEY_LIMITS,
}


def _has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, tuple):
        return any(map(_has_nul, value))
    if is_dataclass(value):
        return any(_has_nul(getattr(value, f.name)) for f in fields(value))
    return False


def _unstorable(kind: str, item: Any) -> str | None:
    """Why storage could not hold a read object, or None."""
    for name, limit in _KEY_LIMITS[kind]:
        value = getattr(item, name)
        if "\x00" in value:
            return f"{name} holds a NUL character"
        if len(value) > limit:
            return f"{name} is longer than {limit} characters"
    if _has_nul(item):
        return "a field holds a NUL character"
    return None


def _shown(item: Any) -> str:
    namespace = getattr(item, "namespace", "")
    text = f"{namespace}/{item.name}" if namespace else item.name
    return repr(text[:300])[1:-1]


def _items(document: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise KubernetesError("body has no kind (expected List, PodList, NodeList, Pod, …)")
    if kind == "List" or kind.endswith("List"):
        default = kind[: -len("List")] if kind != "List" else ""
        for index, raw in enumerate(_list(document.get("items"), f"{kind} items")):
            item = _obj(raw, f"{kind} items[{index}]")
            item_kind = item.get("kind") or default
            if not isinstance(item_kind, str) or not item_kind:
                raise KubernetesError(f"{kind} items[{index}] has no kind")
            yield item_kind, item
    else:
        yield kind, document


def kubernetes_parse(*, body: bytes) -> ClusterSnapshot:
    """Parse kubectl JSON. Raises `KubernetesError` naming the object that is unusable."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise KubernetesError(f"body is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise KubernetesError("body must be a JSON object (a List or a Kubernetes object)")
    found: dict[str, list[Any]] = {kind: [] for kind in _READERS}
    ignored: dict[str, int] = {}
    rejected: list[RejectedObject] = []
    for kind, item in _items(document):
        reader = _READERS.get(kind)
        if reader is None:
            ignored[kind] = ignored.get(kind, 0) + 1
            continue
        read = reader(item)
        problem = _unstorable(kind, read)
        if problem is not None:
            rejected.append(RejectedObject(kind=kind, name=_shown(read), problem=problem))
            continue
        found[kind].append(read)
    return ClusterSnapshot(
        pods=tuple(found["Pod"]), nodes=tuple(found["Node"]), events=tuple(found["Event"]),
        priority_classes=tuple(found["PriorityClass"]), services=tuple(found["Service"]),
        ingresses=tuple(found["Ingress"]), gateways=tuple(found["Gateway"]),
        http_routes=tuple(found["HTTPRoute"]), ignored=ignored,
        rejected=tuple(rejected),
    )
