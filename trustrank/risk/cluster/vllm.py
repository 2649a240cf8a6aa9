"""Inference serving diagnoses from vLLM's `/metrics`: latency (formula 3), throughput
instability (formula 4); queue imbalance (formula 5) and KV-cache pressure are in
`vllm_queues`.

vLLM metric names used (label `model_name` on each):

| metric | type | used for |
| --- | --- | --- |
| `vllm:e2e_request_latency_seconds` | histogram | latency |
| `vllm:time_to_first_token_seconds` | histogram | latency |
| `vllm:generation_tokens_total` | counter | throughput |
| `vllm:request_success_total` | counter (label `finished_reason`; sum them) | completions μ |
| `vllm:num_requests_waiting` / `vllm:num_requests_running` | gauges | Q, arrivals λ |
| `vllm:gpu_cache_usage_perc` (V0) / `vllm:kv_cache_usage_perc` (V1) | gauge, 0..1 | KV cache |
| `vllm:num_preemptions_total` | counter | KV cache |

vLLM has no arrivals counter, so arrivals are reconstructed by conservation: every request
that arrived in an interval has finished, is running or is waiting, so
λ = μ + Δ(waiting + running)/Δt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trustrank.parsers.series import Series
from trustrank.risk.cluster.findings import (
    Diagnosis,
    Samples,
    Severity,
    SubjectKind,
    evidence,
)
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

LATENCY_METRICS = ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds")


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A cumulative histogram at one time: (upper bound, cumulative count) with +Inf last."""

    t: float
    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class LatencySeries:
    metric: str
    model: str
    subject: str  # namespace/pod
    snapshots: Sequence[HistogramSnapshot]
    workload: str = ""


def latency_series_from(*, series: Iterable[Series], metric: str) -> list[LatencySeries]:
    """Group `<metric>_bucket`/`_sum`/`_count` series (from any parser) into
    `LatencySeries`, one per model and pod (labels `model_name`, `namespace`, `pod`; or
    the OTLP resource's `k8s.namespace.name`, `k8s.pod.name`)."""
    parts: dict[tuple[str, str], dict[float, dict[str, object]]] = {}
    for item in series:
        if not item.name.startswith(metric):
            continue
        suffix = item.name[len(metric):]
        if suffix not in ("_bucket", "_sum", "_count"):
            continue
        namespace = item.label("namespace") or item.label("k8s.namespace.name")
        pod = item.label("pod") or item.label("k8s.pod.name")
        key = (item.label("model_name"), f"{namespace}/{pod}")
        by_time = parts.setdefault(key, {})
        for ms, value in zip(item.timestamps_ms, item.values, strict=True):
            entry = by_time.setdefault(ms / 1000, {"buckets": {}, "sum": 0.0, "count": 0.0})
            if suffix == "_bucket":
                le = item.label("le")
                try:
                    bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
                except ValueError:
                    continue  # not a bucket bound: ignore the sample, keep the rest
                entry["buckets"][bound] = value  # type: ignore[index]
            else:
                entry[suffix[1:]] = value
    result = []
    for (model, subject), by_time in sorted(parts.items()):
        snapshots = [
            HistogramSnapshot(
                t=t, buckets=tuple(sorted(entry["buckets"].items())),  # type: ignore[attr-defined]
                sum=float(entry["sum"]), count=float(entry["count"]),  # type: ignore[arg-type]
            )
            for t, entry in sorted(by_time.items())
        ]
        result.append(LatencySeries(metric=metric, model=model, subject=subject,
                                    snapshots=snapshots))
    return result


def _delta(now: HistogramSnapshot, before: HistogramSnapshot | None) -> HistogramSnapshot:
    if before is None or now.count < before.count or len(now.buckets) != len(before.buckets):
        # First window, or the counters reset (restart): the snapshot is the increase.
        return now
    previous = dict(before.buckets)
    return HistogramSnapshot(
        t=now.t,
        buckets=tuple((le, count - previous.get(le, 0.0)) for le, count in now.buckets),
        sum=now.sum - before.sum, count=now.count - before.count,
    )


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile on cumulative buckets: linear within the bucket,
    0 as the first lower bound, the highest finite bound if it falls in +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def _dispersion(snapshot: HistogramSnapshot) -> tuple[float, float]:
    """(mean, standard deviation) of one window's latencies: mean from _sum/_count, the
    spread from bucket midpoints (the +Inf bucket at the highest finite bound)."""
    count = snapshot.count
    if count <= 0:
        return 0.0, 0.0
    mean = snapshot.sum / count
    variance = 0.0
    lower, below = 0.0, 0.0
    for bound, cumulative in snapshot.buckets:
        n = cumulative - below
        middle = lower if math.isinf(bound) else (lower + bound) / 2
        variance += n * (middle - mean) ** 2
        if not math.isinf(bound):
            lower = bound
        below = cumulative
    return mean, math.sqrt(variance / count)


@dataclass(frozen=True, slots=True)
class LatencyWindow:
    start: float
    requests: float
    p99: float
    mean: float
    sigma: float
    baseline_p99: float  # EWMA of the previous windows' p99
    threshold: float  # formula 3; nan during warm-up
    violated: bool


def latency_windows(
    *, snapshots: Sequence[HistogramSnapshot],
    thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[LatencyWindow]:
    """Formula 3 over consecutive windows: T = p99_hist · (1 + 0.3·σ/μ), p99_hist the
    EWMA (decay 0.95) of earlier windows' p99, σ/μ the window's own spread; a window
    violates when its p99 exceeds T. Windows with too few requests are skipped."""
    size = thresholds.latency_window_s
    decay = thresholds.latency_ewma_decay
    ordered = sorted(snapshots, key=lambda s: s.t)
    if not ordered:
        return []
    origin = ordered[0].t
    last_in_window: dict[int, HistogramSnapshot] = {}
    for snapshot in ordered:
        last_in_window[int((snapshot.t - origin) // size)] = snapshot
    windows = []
    baseline = math.nan
    history = 0
    # The first scrape only sets where the counters start; each window is the increase
    # from the previous window's last scrape to its own.
    previous = ordered[0]
    for index in sorted(last_in_window):
        current = last_in_window[index]
        if current is previous:
            continue
        delta = _delta(current, previous)
        previous = current
        if delta.count < thresholds.latency_min_requests:
            continue
        p99 = histogram_quantile(thresholds.latency_quantile, delta.buckets)
        mean, sigma = _dispersion(delta)
        threshold = math.nan
        violated = False
        if history >= thresholds.latency_warmup_windows and mean > 0:
            threshold = baseline * (1 + thresholds.latency_cv_factor * sigma / mean)
            violated = p99 > threshold
        windows.append(LatencyWindow(
            start=origin + index * size, requests=delta.count, p99=p99, mean=mean,
            sigma=sigma, baseline_p99=baseline, threshold=threshold, violated=violated,
        ))
        baseline = p99 if history == 0 else decay * baseline + (1 - decay) * p99
        history += 1
    return windows


def latency_diagnose(
    *, series: Iterable[LatencySeries], thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    found = []
    for item in series:
        windows = latency_windows(snapshots=item.snapshots, thresholds=thresholds)
        violations = [w for w in windows if w.violated]
        if not violations:
            continue
        judged = sum(1 for w in windows if not math.isnan(w.threshold))
        worst = max(violations, key=lambda w: w.p99 / w.threshold)
        share = len(violations) / judged
        short = item.metric.removeprefix("vllm:")
        found.append(Diagnosis(
            kind="inference_latency", subject_kind=SubjectKind.POD, subject=item.subject,
            severity=Severity.HIGH if len(violations) >= 3 or share > 0.25 else Severity.MEDIUM,
            title=(
                f"{item.model or 'model'} on {item.subject}: p99 {short} above its adaptive "
                f"threshold in {len(violations)} of {judged} windows"
            ),
            evidence=evidence(
                metric=item.metric, model=item.model, windows_judged=judged,
                violations=[
                    {"start": w.start, "p99": w.p99, "threshold": w.threshold,
                     "baseline_p99": w.baseline_p99, "mean": w.mean, "sigma": w.sigma,
                     "requests": w.requests}
                    for w in violations
                ],
                worst_ratio=round(worst.p99 / worst.threshold, 4),
                window_s=thresholds.latency_window_s, ewma_decay=thresholds.latency_ewma_decay,
                cv_factor=thresholds.latency_cv_factor,
            ),
            workload=item.workload, discriminator=f"{item.model}|{item.metric}",
        ))
    return found


# --- throughput (formula 4) ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CounterSeries:
    """A cumulative counter of one pod (or workload), e.g. generation tokens."""

    subject: str
    samples: Samples
    model: str = ""
    workload: str = ""


def _rates(samples: Samples) -> list[tuple[float, float]]:
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t1 <= t0:
            continue
        increase = v1 - v0 if v1 >= v0 else v1
        out.append((t1, increase / (t1 - t0)))
    return out


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    max_variance: float  # (tokens/s)^2, over the worst window
    window_end: float
    rates_in_window: tuple[float, ...]
    weight: float  # formula 4: the re-estimation weight, 1.0 or 1.8


def throughput_instability(
    *, samples: Samples, thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> ThroughputResult:
    """Population variance of tokens/s rates within each sliding window (ending at each
    rate); the weight is raised when the worst window's variance is above the limit."""
    rates = _rates(sorted(samples))
    worst = ThroughputResult(0.0, math.nan, (), 1.0)
    size = thresholds.throughput_window_s
    start = 0
    for end in range(len(rates)):
        while rates[end][0] - rates[start][0] >= size:
            start += 1
        window = [rate for _, rate in rates[start:end + 1]]
        if len(window) < 2:
            continue
        mean = sum(window) / len(window)
        variance = sum((r - mean) ** 2 for r in window) / len(window)
        if variance > worst.max_variance:
            worst = ThroughputResult(variance, rates[end][0], tuple(window), 1.0)
    if worst.max_variance > thresholds.throughput_variance:
        return ThroughputResult(worst.max_variance, worst.window_end, worst.rates_in_window,
                                thresholds.throughput_weight)
    return worst


def throughput_diagnose(
    *, series: Iterable[CounterSeries], thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    found = []
    for item in series:
        result = throughput_instability(samples=item.samples, thresholds=thresholds)
        if result.weight == 1.0:
            continue
        found.append(Diagnosis(
            kind="inference_throughput_unstable", subject_kind=SubjectKind.POD,
            subject=item.subject, severity=Severity.MEDIUM,
            title=(
                f"{item.model or 'model'} on {item.subject}: token throughput variance "
                f"{result.max_variance:.0f} (tokens/s)² in a {thresholds.throughput_window_s:g} s "
                f"window; priority re-estimated with weight {result.weight:g}"
            ),
            evidence=evidence(
                variance=round(result.max_variance, 3), limit=thresholds.throughput_variance,
                window_s=thresholds.throughput_window_s, window_end=result.window_end,
                rates=[round(r, 3) for r in result.rates_in_window], weight=result.weight,
            ),
            workload=item.workload, discriminator=item.model,
        ))
    return found
