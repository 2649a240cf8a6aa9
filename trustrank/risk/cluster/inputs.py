"""From parsed `Series` (any of the three metric parsers) to the diagnoses' inputs.

A series belongs to a pod by its `namespace`/`pod` labels (dcgm-exporter with
Kubernetes mapping, vLLM scraped by a pod monitor) or the OTLP resource attributes
`k8s.namespace.name`/`k8s.pod.name` that `ParsedMetrics.series()` copies; series that name
no pod are skipped where a pod is needed. Samples of one pod at one timestamp are combined
(summed for counters such as `vllm:request_success_total` across `finished_reason`,
averaged for utilisation across a pod's GPUs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from trustrank.parsers.kubernetes_objects import Pod
from trustrank.parsers.series import Series
from trustrank.risk.cluster.findings import Samples, workload_key
from trustrank.risk.cluster.gpu import (
    UTILISATION_METRICS,
    GpuMemory,
    training_signals,
    utilisation_percent,
)
from trustrank.risk.cluster.io import IoDevice
from trustrank.risk.cluster.rdma import TrafficClassCounters
from trustrank.risk.cluster.vllm import CounterSeries
from trustrank.risk.cluster.vllm_queues import KV_CACHE_METRICS, KvCacheSeries, QueueSeries


def series_pod(series: Series) -> str:
    """"namespace/pod" of a series, or "" when it names no pod."""
    pod = series.label("pod") or series.label("k8s.pod.name")
    if not pod:
        return ""
    return f"{series.label('namespace') or series.label('k8s.namespace.name')}/{pod}"


def _combined(
    series: Iterable[Series], names: Iterable[str], *, average: bool,
) -> dict[tuple[str, str], Samples]:
    """(pod, model) -> samples, combining every matching series of that pod and model."""
    # The Collector may drop a counter's _total suffix (name normalisation): accept both.
    wanted = set(names) | {name.removesuffix("_total") for name in names}
    sums: dict[tuple[str, str], dict[float, list[float]]] = {}
    for item in series:
        if item.name not in wanted:
            continue
        name = item.name if item.name in UTILISATION_METRICS else ""
        pod = series_pod(item)
        if not pod:
            continue
        by_time = sums.setdefault((pod, item.label("model_name")), {})
        for ms, value in zip(item.timestamps_ms, item.values, strict=True):
            if name:
                value = utilisation_percent(metric=name, value=value)
            by_time.setdefault(ms / 1000, []).append(value)
    return {
        key: [
            (t, sum(values) / len(values) if average else sum(values))
            for t, values in sorted(by_time.items())
        ]
        for key, by_time in sums.items()
    }


def utilisation_by_pod(*, series: Iterable[Series]) -> dict[str, Samples]:
    """GPU utilisation in percent per pod (the mean of its GPUs at each time), from
    DCGM_FI_DEV_GPU_UTIL or DCGM_FI_PROF_GR_ENGINE_ACTIVE, for `over_reserved_diagnose`."""
    combined = _combined(series, UTILISATION_METRICS, average=True)
    return {pod: samples for (pod, _), samples in combined.items()}


def gpu_memory_latest(*, series: Iterable[Series]) -> list[GpuMemory]:
    """The latest framebuffer free/used/reserved (MiB) per GPU (`Hostname` or the OTLP
    `k8s.node.name`, and `gpu`), for `fragmentation_diagnose`."""
    fields = {"DCGM_FI_DEV_FB_FREE": 0, "DCGM_FI_DEV_FB_USED": 1, "DCGM_FI_DEV_FB_RESERVED": 2}
    latest: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for item in series:
        index = fields.get(item.name)
        if index is None or not item.timestamps_ms:
            continue
        node = item.label("Hostname") or item.label("k8s.node.name")
        gpu = item.label("gpu") or item.label("UUID")
        slot = latest.setdefault((node, gpu), [(-1, 0.0)] * 3)
        at = max(range(len(item.timestamps_ms)), key=lambda i: item.timestamps_ms[i])
        if item.timestamps_ms[at] > slot[index][0]:
            slot[index] = (item.timestamps_ms[at], item.values[at])
    return [
        GpuMemory(node=node, gpu=gpu, free_mib=slot[0][1], used_mib=slot[1][1],
                  reserved_mib=slot[2][1])
        for (node, gpu), slot in sorted(latest.items())
        if slot[0][0] >= 0 and slot[1][0] >= 0
    ]


def counter_series(*, series: Iterable[Series], metric: str) -> list[CounterSeries]:
    """One counter per pod and model (e.g. vllm:generation_tokens_total for
    `throughput_diagnose`), summed over the other labels."""
    return [
        CounterSeries(subject=pod, samples=samples, model=model)
        for (pod, model), samples in sorted(_combined(series, [metric], average=False).items())
    ]


def queue_series(*, series: Iterable[Series]) -> list[QueueSeries]:
    """vLLM's waiting/running gauges and success counter per pod and model, for
    `queue_diagnose`."""
    items = list(series)
    waiting = _combined(items, ["vllm:num_requests_waiting"], average=False)
    running = _combined(items, ["vllm:num_requests_running"], average=False)
    completed = _combined(items, ["vllm:request_success_total"], average=False)
    return [
        QueueSeries(subject=pod, model=model, waiting=samples,
                    completed=completed.get((pod, model), []),
                    running=running.get((pod, model), []))
        for (pod, model), samples in sorted(waiting.items())
    ]


def kv_cache_series(*, series: Iterable[Series]) -> list[KvCacheSeries]:
    """KV-cache usage (either vLLM name) with the preemption counter per pod and model, for
    `kv_cache_diagnose`."""
    items = list(series)
    usage = _combined(items, KV_CACHE_METRICS, average=True)
    preemptions = _combined(items, ["vllm:num_preemptions_total"], average=False)
    return [
        KvCacheSeries(subject=pod, model=model, usage=samples,
                      preemptions=preemptions.get((pod, model), []))
        for (pod, model), samples in sorted(usage.items())
    ]


# --- I/O throttling (formula 13) from node-exporter and cAdvisor -------------------------

DISK_METRICS = (
    "node_disk_read_time_seconds_total", "node_disk_write_time_seconds_total",
    "node_disk_reads_completed_total", "node_disk_writes_completed_total",
    "node_disk_io_time_seconds_total", "node_disk_info",
)
CONTAINER_FS_METRICS = (
    "container_fs_reads_bytes_total", "container_fs_writes_bytes_total",
    "container_fs_reads_total", "container_fs_writes_total",
)
IO_METRICS = (*DISK_METRICS, *CONTAINER_FS_METRICS)
_MINUTE_MS = 60_000

# (minute, time in seconds, increase since the previous minute, seconds since it)
_Increase = tuple[int, float, float, float]


def series_node(series: Series) -> str:
    """The node a series describes: the labels the storage links a node by (`Hostname`,
    `k8s.node.name`, `node`), else the scrape's `instance` without its port (a
    node-exporter scraped by node IP gives the IP, which matches no Kubernetes node name
    unless relabelled)."""
    for label in ("node", "Hostname", "k8s.node.name"):
        if value := series.label(label):
            return value
    instance = series.label("instance")
    host, _, port = instance.rpartition(":")
    return host if host and port.isdigit() and not host.endswith(":") else instance


def _device_name(device: str) -> str:
    """cAdvisor labels a device by path (/dev/nvme0n1), node-exporter by name (nvme0n1)."""
    return device.rsplit("/", 1)[-1]


def counter_increases(samples: Iterable[tuple[int, float]]) -> list[_Increase]:
    """Per-minute increases of a cumulative counter between samples of consecutive
    minutes (a gap breaks the run). A value below the previous one is a reset (exporter or
    node restart): the increase is the new value, counted from zero, never negative."""
    found: list[_Increase] = []
    previous: tuple[int, int, float] | None = None
    for ms, value in sorted(samples):
        minute = ms // _MINUTE_MS
        if previous is not None and minute == previous[0] + 1 and ms > previous[1]:
            increase = value - previous[2] if value >= previous[2] else value
            found.append((minute, ms / 1000, increase, (ms - previous[1]) / 1000))
        previous = (minute, ms, value)
    return found


def _by_minute(items: Iterable[Series]) -> dict[int, tuple[float, float, float]]:
    """Increases of several series (e.g. one counter's containers) summed per minute:
    minute -> (time, increase, seconds)."""
    summed: dict[int, tuple[float, float, float]] = {}
    for item in items:
        for minute, t, increase, seconds in counter_increases(
                zip(item.timestamps_ms, item.values, strict=True)):
            _, before, _ = summed.get(minute, (t, 0.0, seconds))
            summed[minute] = (t, before + increase, seconds)
    return summed


def _pod_by_name(pods: Iterable[Pod]) -> dict[str, Pod]:
    return {f"{pod.namespace}/{pod.name}": pod for pod in pods}


def _io_subject(
    node: str, pods: Iterable[Pod], latency_sensitive: Mapping[str, bool],
) -> Pod | None:
    """The latency-sensitive pod of the node: a Running pod whose workload the trace
    graph marks as serving latency-sensitive requests, else a Running GPU pod without
    training signals (inference by elimination); the highest declared priority wins."""
    running = [p for p in pods if p.node == node and p.phase == "Running"]
    serving = [p for p in running if latency_sensitive.get(workload_key(p))]
    inference = serving or [
        p for p in running if p.gpu_request.gpus > 0 and not training_signals(p)
    ]
    if not inference:
        return None
    return max(inference, key=lambda p: (p.priority or 0, p.namespace, p.name))


def _neighbour_rates(
    series: Iterable[Series], *, node: str, device: str, pods: Mapping[str, Pod],
) -> dict[str, tuple[float, float, float, float]]:
    """Peak read/write bytes/s and IOs/s per pod on the node and device, from cAdvisor.
    A pod is on the node by the snapshot (else by the series' node label). cAdvisor
    reports each container and the pod's own cgroup (container ""): the pod cgroup, when
    present, already holds its containers, so only it counts."""
    grouped: dict[tuple[str, str], dict[str, list[Series]]] = {}
    for item in series:
        if item.name not in CONTAINER_FS_METRICS or _device_name(item.label("device")) != device:
            continue
        pod = series_pod(item)
        on = pods[pod].node if pod in pods else series_node(item)
        if not pod or on != node:
            continue
        grouped.setdefault((pod, item.name), {}).setdefault(
            item.label("container"), []).append(item)
    peaks: dict[str, list[float]] = {}
    for (pod, name), containers in grouped.items():
        chosen = containers[""] if "" in containers else [
            s for key, items in containers.items() if key != "POD" for s in items
        ]
        rates = [increase / seconds for _, increase, seconds in _by_minute(chosen).values()]
        slot = peaks.setdefault(pod, [0.0] * 4)
        slot[CONTAINER_FS_METRICS.index(name)] = max(rates, default=0.0)
    return {pod: (r[0], r[1], r[2], r[3]) for pod, r in peaks.items()}


def io_devices(
    *, series: Iterable[Series], pods: Iterable[Pod] = (),
    latency_sensitive: Mapping[str, bool] | None = None,
) -> list[IoDevice]:
    """One `IoDevice` per node and block device with node-exporter disk counters.

    Per minute (a period): wait = Δ(read + write time) / Δ(reads + writes completed) ×
    1000 ms (iostat's await; 0 in a minute without I/O); queue = Δ io_time / Δt × 100 %
    (iostat's %util, at most 100), as the mean over the minute (`period_s` 60). MAJ:MIN
    comes from `node_disk_info`; without it the device's name stands in (the io.max line
    then needs the MAJ:MIN from `lsblk`). The subject is the node's latency-sensitive pod
    (`_io_subject`), else the node itself. The neighbour is the other pod with the highest
    peak bytes/s (then IOs/s) on that device from cAdvisor; without cAdvisor series there
    is none, its rates are 0 and the io.max line says `max` (no limit to copy)."""
    items = list(series)
    pods = list(pods)
    by_name = _pod_by_name(pods)
    latency_sensitive = latency_sensitive or {}
    disks: dict[tuple[str, str], dict[str, list[Series]]] = {}
    majmin: dict[tuple[str, str], str] = {}
    for item in items:
        if item.name not in DISK_METRICS:
            continue
        key = (series_node(item), item.label("device"))
        if item.name == "node_disk_info":
            if item.label("major") and item.label("minor"):
                majmin[key] = f"{item.label('major')}:{item.label('minor')}"
            continue
        disks.setdefault(key, {}).setdefault(item.name, []).append(item)
    found = []
    for (node, device), counters in sorted(disks.items()):
        got = {name: _by_minute(counters.get(name, [])) for name in DISK_METRICS[:5]}
        read_time, write_time, reads, writes, busy = got.values()
        wait = []
        for minute in sorted(set(read_time) | set(write_time)):
            time_pairs = [(read_time, reads), (write_time, writes)]
            spent = sum(t[minute][1] for t, n in time_pairs if minute in t and minute in n)
            done = sum(n[minute][1] for t, n in time_pairs if minute in t and minute in n)
            at = (read_time.get(minute) or write_time[minute])[0]
            if any(minute in t and minute in n for t, n in time_pairs):
                wait.append((at, spent / done * 1000 if done > 0 else 0.0))
        queue = [
            (t, min(100.0, increase / seconds * 100))
            for _, (t, increase, seconds) in sorted(busy.items())
        ]
        subject = _io_subject(node, pods, latency_sensitive)
        subject_name = f"{subject.namespace}/{subject.name}" if subject else ""
        rates = {
            pod: peak for pod, peak in _neighbour_rates(
                items, node=node, device=device, pods=by_name).items()
            if pod != subject_name
        }
        neighbour = max(
            rates, key=lambda pod: (rates[pod][0] + rates[pod][1],
                                    rates[pod][2] + rates[pod][3], pod),
            default="",
        )
        rbps, wbps, riops, wiops = rates.get(neighbour, (0.0, 0.0, 0.0, 0.0))
        found.append(IoDevice(
            subject=subject_name or node, device=majmin.get((node, device), device),
            wait_ms=wait, queue_percent=queue, neighbour=neighbour,
            neighbour_rbps=rbps, neighbour_wbps=wbps, neighbour_riops=riops,
            neighbour_wiops=wiops, workload=workload_key(subject) if subject else "",
            period_s=60.0,
        ))
    return found


# --- RDMA congestion (formula 14) from per-port, per-priority NIC counters ---------------

# Read by prefix: the per-priority mlx5 ethtool statistics as node-exporter's ethtool
# collector names them (`node_ethtool_rx_prio3_packets`), and the `rdma_` vocabulary below.
RDMA_PREFIXES = (
    "rdma_", "node_ethtool_rx_prio", "node_infiniband_np_", "node_infiniband_rp_",
)
# Statistic (name without prefix, `_total` and any `rx_prio<N>_`) -> field.
_RDMA_FIELDS = {
    "packets": "packets", "rx_packets": "packets",
    "discards": "drops", "buf_discard": "drops", "cong_discard": "drops",
    "drops": "drops", "rx_discards": "drops", "rx_drops": "drops",
    "np_cnp_sent": "cnp", "rp_cnp_handled": "cnp",
    "marked": "ecn_marked", "rx_ecn_mark": "ecn_marked", "ecn_marked": "ecn_marked",
    "np_ecn_marked_roce_packets": "ecn_marked",
    "retransmits": "retransmits", "roce_adp_retrans": "retransmits",
}
_PRIO_NAME = re.compile(r"rx_prio(\d+)_(.+)")
_TC_LABELS = ("priority", "prio", "traffic_class", "tc")


def _rdma_field(item: Series) -> tuple[str, int | None] | None:
    """(field, traffic class or None for a port-wide counter) of an RDMA series."""
    stat = item.name.removesuffix("_total")
    for prefix in ("rdma_", "node_ethtool_", "node_infiniband_"):
        stat = stat.removeprefix(prefix)
    tc: int | None = None
    if named := _PRIO_NAME.fullmatch(stat):
        tc, stat = int(named.group(1)), named.group(2)
    else:
        label = next((item.label(k) for k in _TC_LABELS if item.label(k)), "")
        tc = int(label) if label.isascii() and label.isdigit() else None
    field = _RDMA_FIELDS.get(stat)
    return (field, tc) if field else None


def rdma_counters(*, series: Iterable[Series]) -> list[TrafficClassCounters]:
    """One `TrafficClassCounters` per node, port (`device`/`port`, port "1" when
    unlabelled) and traffic class, from the increases over the newest minute in which both
    its packets and its drops counters have a sample and one the minute before. Several
    drop counters of a class (discards, buffer and congestion discards) add up. Counters
    without a class (the NIC counts CNPs, ECN marks and retransmits per port in its RDMA
    hw_counters) count for every class of their port; a reset counts from zero."""
    fields: dict[tuple[str, str, int | None], dict[str, list[Series]]] = {}
    for item in series:
        found = _rdma_field(item)
        if found is None:
            continue
        field, tc = found
        port = f"{item.label('device')}/{item.label('port') or '1'}"
        fields.setdefault((series_node(item), port, tc), {}).setdefault(field, []).append(item)
    result = []
    for (node, port, tc), by_field in sorted(fields.items(), key=lambda kv: (
            kv[0][0], kv[0][1], -1 if kv[0][2] is None else kv[0][2])):
        if tc is None or "packets" not in by_field or "drops" not in by_field:
            continue
        increases = {name: _by_minute(items) for name, items in by_field.items()}
        port_wide = {
            name: _by_minute(items)
            for name, items in fields.get((node, port, None), {}).items()
        }
        both = set(increases["packets"]) & set(increases["drops"])
        if not both:
            continue
        minute = max(both)
        values = {
            name: own[minute][1] if minute in own else 0.0
            for name in ("packets", "drops", "cnp", "ecn_marked", "retransmits")
            for own in [increases.get(name, port_wide.get(name, {}))]
        }
        result.append(TrafficClassCounters(
            node=node, port=port, traffic_class=tc,
            interval_s=increases["packets"][minute][2], **values,
        ))
    return result


def vllm_pods(*, series: Iterable[Series]) -> set[str]:
    """"namespace/pod" of every pod that exports vLLM's metrics (`vllm:*`): an inference
    server, whatever its name or image (`inference.inference_signals`)."""
    return {pod for item in series if item.name.startswith("vllm:") and (pod := series_pod(item))}


def gpus_by_pod(*, series: Iterable[Series]) -> dict[str, int]:
    """How many GPUs the DCGM utilisation series name per pod (dcgm-exporter's Kubernetes
    mapping labels a GPU's series with the pod that holds it)."""
    gpus: dict[str, set[tuple[str, str]]] = {}
    for item in series:
        if item.name not in UTILISATION_METRICS or not (pod := series_pod(item)):
            continue
        node = item.label("Hostname") or item.label("k8s.node.name") or item.label("node")
        gpu = item.label("UUID") or item.label("uuid") or item.label("gpu")
        if gpu:
            gpus.setdefault(pod, set()).add((node, gpu))
    return {pod: len(found) for pod, found in gpus.items()}
