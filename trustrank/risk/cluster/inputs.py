"""From parsed `Series` (any of the three metric parsers) to the diagnoses' inputs.

A series belongs to a pod by its `namespace`/`pod` labels (dcgm-exporter with
Kubernetes mapping, vLLM scraped by a pod monitor) or the OTLP resource attributes
`k8s.namespace.name`/`k8s.pod.name` that `ParsedMetrics.series()` copies; series that name
no pod are skipped where a pod is needed. Samples of one pod at one timestamp are combined
(summed for counters such as `vllm:request_success_total` across `finished_reason`,
averaged for utilisation across a pod's GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable

from trustrank.parsers.series import Series
from trustrank.risk.cluster.findings import Samples
from trustrank.risk.cluster.gpu import UTILISATION_METRICS, GpuMemory, utilisation_percent
from trustrank.risk.cluster.vllm import KV_CACHE_METRICS, CounterSeries, KvCacheSeries, QueueSeries


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
