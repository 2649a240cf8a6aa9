from __future__ import annotations

from pathlib import Path

import pytest

from trustrank.parsers.prometheus_text import prometheus_text_parse
from trustrank.parsers.series import MetricKind, Series
from trustrank.risk.cluster.inputs import (
    counter_series,
    gpu_memory_latest,
    kv_cache_series,
    queue_series,
    series_pod,
    utilisation_by_pod,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "telemetry"


def _vllm(at_ms: int, *, waiting: int, running: int, ok: int, length: int, usage: float, preempted: int) -> list[Series]:
    labels = 'model_name="llama",namespace="serving",pod="vllm-0"'
    body = f"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{finished_reason="stop",{labels}}} {ok}
vllm:request_success_total{{finished_reason="length",{labels}}} {length}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{labels}}} {usage}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{labels}}} {preempted}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{labels}}} {ok * 100}
""".encode()
    return list(prometheus_text_parse(body=body, scraped_at_ms=at_ms).series)


def test_vllm_scrapes_become_queue_kv_and_counter_inputs():
    series = _vllm(0, waiting=1, running=4, ok=10, length=2, usage=0.5, preempted=0) + _vllm(
        15_000, waiting=3, running=4, ok=20, length=3, usage=0.95, preempted=2)
    (queue,) = queue_series(series=series)
    assert (queue.subject, queue.model) == ("serving/vllm-0", "llama")
    assert queue.waiting == [(0.0, 1.0), (15.0, 3.0)]
    assert queue.completed == [(0.0, 12.0), (15.0, 23.0)]  # summed over finished_reason
    assert queue.running == [(0.0, 4.0), (15.0, 4.0)]
    (kv,) = kv_cache_series(series=series)
    assert kv.usage == [(0.0, 0.5), (15.0, 0.95)] and kv.preemptions == [(0.0, 0.0), (15.0, 2.0)]
    (tokens,) = counter_series(series=series, metric="vllm:generation_tokens_total")
    assert tokens.samples == [(0.0, 1000.0), (15.0, 2000.0)]


def test_normalised_counter_names_are_accepted():
    item = Series(name="vllm:generation_tokens", labels=(("k8s.namespace.name", "s"), ("k8s.pod.name", "p")),
                  kind=MetricKind.COUNTER, timestamps_ms=(1000,), values=(5.0,))
    (tokens,) = counter_series(series=[item], metric="vllm:generation_tokens_total")
    assert (tokens.subject, tokens.samples) == ("s/p", [(1.0, 5.0)])


def test_dcgm_corpus_scrape_gives_gpu_memory_and_pod_utilisation():
    series = list(prometheus_text_parse(
        body=(DATA / "datadog-integrations-core_dcgm_metrics.txt").read_bytes(), scraped_at_ms=5_000,
    ).series)
    memory = {(m.node, m.gpu): m for m in gpu_memory_latest(series=series)}
    t4 = memory[("424773df46e0", "0")]
    assert (t4.free_mib, t4.used_mib) == (15109.0, 0.0)
    assert t4.total_mib >= 15109.0
    pods = [series_pod(s) for s in series if series_pod(s)]
    assert set(pods) == {"ray-llm/ray-1111111"}


@pytest.mark.parametrize(("metric", "values", "expected"), [
    ("DCGM_FI_DEV_GPU_UTIL", (30.0, 50.0), 40.0),  # mean of the pod's GPUs
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", (0.2, 0.4), 30.0),  # ratio scaled to percent
])
def test_utilisation_by_pod(metric, values, expected):
    series = [
        Series(name=metric, labels=(("gpu", str(g)), ("namespace", "ml"), ("pod", "p")), kind=MetricKind.GAUGE,
               timestamps_ms=(60_000,), values=(v,))
        for g, v in enumerate(values)
    ]
    assert utilisation_by_pod(series=series) == {"ml/p": [(60.0, pytest.approx(expected))]}
