from __future__ import annotations

import math

import pytest

from trustrank.parsers.prometheus_text import prometheus_text_parse
from trustrank.risk.cluster.settings import ClusterThresholds
from trustrank.risk.cluster.vllm import (
    CounterSeries,
    HistogramSnapshot,
    LatencySeries,
    histogram_quantile,
    latency_diagnose,
    latency_series_from,
    latency_windows,
    throughput_diagnose,
    throughput_instability,
)
from trustrank.risk.cluster.vllm_queues import (
    KvCacheSeries,
    QueueSeries,
    kv_cache_diagnose,
    queue_diagnose,
    queue_intervals,
)

BOUNDS = (0.1, 0.2, 0.5, 1.0, 2.0, math.inf)
STEADY = (50, 40, 9, 1, 0, 0)  # p99 = 0.5 s
SLOW = (10, 10, 20, 30, 30, 0)  # p99 ≈ 1.97 s
SOME = (5, 5, 3, 1, 0, 0)  # 14 requests: too few to judge


def _snapshots(windows, *, start=1000.0, step=60.0):
    """Cumulative snapshots: one at `start`, then one per window of per-bucket counts."""
    totals = [0.0] * len(BOUNDS)
    total_sum = 0.0
    out = [HistogramSnapshot(t=start, buckets=tuple(zip(BOUNDS, totals, strict=True)), sum=0.0, count=0.0)]
    for index, counts in enumerate(windows):
        if counts == "reset":
            totals = [0.0] * len(BOUNDS)
            total_sum = 0.0
            counts = STEADY
        for i, c in enumerate(counts):
            totals[i] += c
        total_sum += sum(c * m for c, m in zip(counts, (0.05, 0.15, 0.35, 0.75, 1.5, 2.0), strict=True))
        cumulative = [sum(totals[: i + 1]) for i in range(len(BOUNDS))]
        out.append(HistogramSnapshot(t=start + step * (index + 1) - 1, buckets=tuple(zip(BOUNDS, cumulative, strict=True)),
                                     sum=total_sum, count=cumulative[-1]))
    return out


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = ((0.1, 50.0), (0.2, 90.0), (0.5, 99.0), (1.0, 100.0), (math.inf, 100.0))
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.995, buckets) == pytest.approx(0.75)
    assert histogram_quantile(0.99, ((1.0, 0.0), (math.inf, 10.0))) == 1.0  # in +Inf: highest finite bound
    assert math.isnan(histogram_quantile(0.99, ((1.0, 0.0), (math.inf, 0.0))))


@pytest.mark.parametrize(
    ("windows", "violations"),
    [
        ([STEADY] * 6, 0),
        ([STEADY] * 4 + [SLOW], 1),
        ([STEADY] * 3 + [SLOW], 1),  # exactly the 3 warm-up windows, then judged
        ([STEADY] * 2 + [SLOW], 0),  # still warming up
        ([STEADY] * 4 + [SOME], 0),  # too few requests to judge
        ([STEADY] * 4 + ["reset", SLOW], 1),  # a restart does not read as a huge window
        ([STEADY] * 4 + [SLOW, SLOW, SLOW], 3),
    ],
)
def test_latency_violations(windows, violations):
    series = LatencySeries(metric="vllm:e2e_request_latency_seconds", model="llama", subject="serving/vllm-0",
                           snapshots=_snapshots(windows), workload="serving/Deployment/vllm")
    found = latency_diagnose(series=[series])
    assert (len(found[0].evidence_dict()["violations"]) if found else 0) == violations
    if violations:
        (item,) = found
        assert item.kind == "inference_latency" and item.subject == "serving/vllm-0"
        assert item.workload == "serving/Deployment/vllm"
        first = item.evidence_dict()["violations"][0]
        assert first["p99"] > first["threshold"] > first["baseline_p99"] == pytest.approx(0.5)


def test_latency_threshold_follows_formula_3():
    windows = latency_windows(snapshots=_snapshots([STEADY] * 4 + [SLOW]))
    last = windows[-1]
    assert last.threshold == pytest.approx(last.baseline_p99 * (1 + 0.3 * last.sigma / last.mean))
    assert [w.violated for w in windows] == [False, False, False, False, True]


def test_latency_series_from_scrapes():
    def scrape(at_ms: int, le_05: int, total: int) -> list:
        body = (
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            f'vllm:time_to_first_token_seconds_bucket{{le="0.5",model_name="m",namespace="s",pod="p"}} {le_05}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m",namespace="s",pod="p"}} {total}\n'
            f'vllm:time_to_first_token_seconds_sum{{model_name="m",namespace="s",pod="p"}} {total * 0.3}\n'
            f'vllm:time_to_first_token_seconds_count{{model_name="m",namespace="s",pod="p"}} {total}\n'
        ).encode()
        return list(prometheus_text_parse(body=body, scraped_at_ms=at_ms).series)

    series = scrape(0, 0, 0) + scrape(60_000, 90, 100)
    (item,) = latency_series_from(series=series, metric="vllm:time_to_first_token_seconds")
    assert (item.model, item.subject) == ("m", "s/p")
    assert item.snapshots[1].buckets == ((0.5, 90.0), (math.inf, 100.0))
    assert item.snapshots[1].count == 100 and item.snapshots[1].t == 60.0


def _tokens(rates, *, start=0.0, step=1.0):
    total, out = 0.0, [(start, 0.0)]
    for index, rate in enumerate(rates):
        total += rate * step
        out.append((start + step * (index + 1), total))
    return out


@pytest.mark.parametrize(
    ("rates", "weight"),
    [
        ([500.0] * 20, 1.0),
        ([500.0, 600.0] * 10, 1.8),  # variance 2,500
        ([500.0, 540.0] * 10, 1.0),  # variance 400
        ([500.0 + 35.0, 500.0 - 35.0] * 10, 1.8),  # 1,225
        ([500.0 + 34.0, 500.0 - 34.0] * 10, 1.0),  # 1,156
    ],
)
def test_throughput_instability_weight(rates, weight):
    result = throughput_instability(samples=_tokens(rates))
    assert result.weight == weight
    found = throughput_diagnose(series=[CounterSeries(subject="s/p", samples=_tokens(rates), model="m")])
    assert bool(found) is (weight > 1)


def test_throughput_variance_exactly_at_the_limit_is_not_above():
    # ±50 around 500: variance exactly 2,500 (exact in binary floating point).
    samples = _tokens([450.0, 550.0] * 10)
    assert throughput_instability(samples=samples).max_variance == 2500.0
    assert throughput_instability(samples=samples, thresholds=ClusterThresholds(throughput_variance=2500.0)).weight == 1.0
    assert throughput_instability(samples=samples, thresholds=ClusterThresholds(throughput_variance=2499.0)).weight == 1.8


def test_throughput_variance_uses_10_second_windows_and_survives_resets():
    # A burst long ago does not count in a later window; a counter reset is not a rate spike.
    samples = _tokens([500.0] * 15 + [500.0, 1500.0] + [500.0] * 30)
    calm = [(t + 1000, v) for t, v in _tokens([500.0] * 15)]
    assert throughput_instability(samples=samples).weight == 1.8
    reset = [*_tokens([500.0] * 15), *[(t + 15.0, v) for t, v in _tokens([500.0] * 15)[1:]]]
    assert throughput_instability(samples=reset).weight == 1.0
    assert throughput_instability(samples=calm).max_variance == 0.0


def _queue(waiting, *, completed_per_interval=2.0, running=4.0, step=15.0):
    times = [i * step for i in range(len(waiting))]
    return QueueSeries(
        subject="s/p", model="m", waiting=list(zip(times, waiting, strict=True)),
        completed=[(t, i * completed_per_interval * step) for i, t in enumerate(times)],
        running=[(t, running) for t in times],
    )


@pytest.mark.parametrize(
    ("waiting", "start"),
    [
        ([0, 0, 0, 0, 0, 0], None),
        ([0, 2, 4, 6, 8, 10], 0.0),  # rising for 75 s
        ([0, 2, 4, 6, 8], 0.0),  # rising for exactly 60 s over 4 intervals
        ([0, 2, 4, 6], None),  # 45 s: not sustained
        ([5, 4, 6, 8, 8, 10, 12, 14, 16, 18], 60.0),  # a plateau breaks the first run
        ([10, 8, 6, 4, 2, 0], None),
    ],
)
def test_queue_imbalance(waiting, start):
    found = queue_diagnose(series=[_queue(waiting)])
    assert (found[0].evidence_dict()["started_at"] if found else None) == start


def test_queue_arrivals_are_completions_plus_growth():
    (interval, *_) = queue_intervals(series=_queue([0, 3]))
    assert interval.completions == pytest.approx(2.0)
    assert interval.arrivals == pytest.approx(2.0 + 3 / 15)
    assert interval.dq_dt == pytest.approx(0.2)
    assert interval.formula == pytest.approx(interval.arrivals - interval.completions)


def test_queue_intervals_skip_missing_scrapes():
    series = _queue([0, 2, 4, 6, 8, 10])
    gappy = QueueSeries(subject="s/p", waiting=series.waiting, completed=[c for c in series.completed if c[0] != 30.0])
    assert len(queue_intervals(series=gappy)) == 3
    assert queue_diagnose(series=[gappy]) == []


@pytest.mark.parametrize(
    ("usage", "preemptions", "flagged"),
    [
        (0.95, [0, 0, 3], True),
        (0.95, [3, 3, 3], False),  # full but nothing preempted
        (0.90, [0, 1, 5], False),  # exactly 90 %: not above
        (0.91, [0, 1, 5], True),
        (0.5, [0, 4, 9], False),
        (0.95, [5, 0, 2], True),  # a counter reset still counts the increase
    ],
)
def test_kv_cache_pressure(usage, preemptions, flagged):
    times = [0.0, 30.0, 60.0]
    series = KvCacheSeries(subject="s/p", model="m", usage=[(t, usage) for t in times],
                           preemptions=list(zip(times, preemptions, strict=True)))
    assert bool(kv_cache_diagnose(series=[series])) is flagged


def test_kv_cache_window_ignores_old_preemptions():
    series = KvCacheSeries(subject="s/p", usage=[(0.0, 0.95), (200.0, 0.95), (230.0, 0.95)],
                           preemptions=[(0.0, 0.0), (100.0, 7.0), (200.0, 7.0), (230.0, 7.0)])
    assert kv_cache_diagnose(series=[series], thresholds=ClusterThresholds(kv_cache_window_s=60)) == []
