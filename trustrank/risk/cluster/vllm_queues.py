"""vLLM queue imbalance (formula 5) and KV-cache pressure; the metric names and how
arrivals are reconstructed are in `vllm`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from trustrank.risk.cluster.findings import (
    Diagnosis,
    Samples,
    Severity,
    SubjectKind,
    counter_increase,
    evidence,
    in_window,
)
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

KV_CACHE_METRICS = ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")


# --- queue imbalance (formula 5) ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueueSeries:
    """One vLLM server's queue: `waiting` and `running` gauges and the `completed` counter
    (vllm:request_success_total summed over finished_reason), sampled at the same times
    (one scrape gives all three)."""

    subject: str
    waiting: Samples
    completed: Samples
    running: Samples = ()
    model: str = ""
    workload: str = ""


@dataclass(frozen=True, slots=True)
class QueueInterval:
    start: float
    end: float
    q: float  # waiting at the end
    arrivals: float  # λ, requests/s
    completions: float  # μ, requests/s
    dq_dt: float  # measured Δwaiting/Δt
    formula: float  # λ − μ·1[Q>0]


def queue_intervals(*, series: QueueSeries) -> list[QueueInterval]:
    running = dict(series.running)
    completed = dict(series.completed)
    waiting = sorted(series.waiting)
    out = []
    for (t0, q0), (t1, q1) in itertools.pairwise(waiting):
        if t1 <= t0 or t0 not in completed or t1 not in completed:
            continue
        dt = t1 - t0
        c0, c1 = completed[t0], completed[t1]
        mu = (c1 - c0 if c1 >= c0 else c1) / dt
        r0, r1 = running.get(t0, 0.0), running.get(t1, 0.0)
        lam = max(0.0, mu + ((q1 + r1) - (q0 + r0)) / dt)
        out.append(QueueInterval(
            start=t0, end=t1, q=q1, arrivals=lam, completions=mu, dq_dt=(q1 - q0) / dt,
            formula=lam - mu * (1.0 if q1 > 0 else 0.0),
        ))
    return out


def queue_diagnose(
    *, series: Iterable[QueueSeries], thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """A finding per server whose waiting queue grew in every interval of a run lasting at
    least `queue_sustained_s` and `queue_min_intervals` intervals; the latest such run is
    reported, with the time it started."""
    found = []
    for item in series:
        intervals = queue_intervals(series=item)
        runs: list[list[QueueInterval]] = []
        current: list[QueueInterval] = []
        for interval in intervals:
            contiguous = not current or current[-1].end == interval.start
            if interval.dq_dt > 0 and contiguous:
                current.append(interval)
                continue
            if current:
                runs.append(current)
            current = [interval] if interval.dq_dt > 0 else []
        if current:
            runs.append(current)
        sustained = [
            run for run in runs
            if len(run) >= thresholds.queue_min_intervals
            and run[-1].end - run[0].start >= thresholds.queue_sustained_s
        ]
        if not sustained:
            continue
        run = sustained[-1]
        duration = run[-1].end - run[0].start
        lam = sum(i.arrivals for i in run) / len(run)
        mu = sum(i.completions for i in run) / len(run)
        growth = (run[-1].q - (run[0].q - run[0].dq_dt * (run[0].end - run[0].start))) / duration
        found.append(Diagnosis(
            kind="inference_queue_imbalance", subject_kind=SubjectKind.POD,
            subject=item.subject,
            severity=Severity.HIGH if duration >= 5 * thresholds.queue_sustained_s
            else Severity.MEDIUM,
            title=(
                f"{item.model or 'model'} on {item.subject}: waiting queue grew for "
                f"{duration:.0f} s (λ {lam:.2f}/s > μ {mu:.2f}/s)"
            ),
            evidence=evidence(
                started_at=run[0].start, duration_s=duration, intervals=len(run),
                arrivals_per_s=round(lam, 6), completions_per_s=round(mu, 6),
                dq_dt=round(growth, 6), q_end=run[-1].q,
                formula_dq_dt=round(sum(i.formula for i in run) / len(run), 6),
            ),
            workload=item.workload, discriminator=item.model,
        ))
    return found


# --- KV cache --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KvCacheSeries:
    subject: str
    usage: Samples  # 0..1
    preemptions: Samples  # vllm:num_preemptions_total
    model: str = ""
    workload: str = ""


def kv_cache_diagnose(
    *, series: Iterable[KvCacheSeries], thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    """Mean KV-cache usage above the limit over the window ending at the last usage
    sample, while preemptions rose in the same window."""
    found = []
    for item in series:
        if not item.usage:
            continue
        end = max(t for t, _ in item.usage)
        start = end - thresholds.kv_cache_window_s
        usage = [v for _, v in in_window(item.usage, start=start, end=end)]
        mean = sum(usage) / len(usage)
        preempted = counter_increase(
            sorted(in_window(item.preemptions, start=start, end=end))
        )
        if mean <= thresholds.kv_cache_usage or preempted <= 0:
            continue
        found.append(Diagnosis(
            kind="inference_kv_cache_pressure", subject_kind=SubjectKind.POD,
            subject=item.subject, severity=Severity.HIGH if mean >= 0.98 else Severity.MEDIUM,
            title=(
                f"{item.model or 'model'} on {item.subject}: KV cache {mean:.0%} full with "
                f"{preempted:g} preemptions in {thresholds.kv_cache_window_s:g} s"
            ),
            evidence=evidence(
                mean_usage=round(mean, 6), limit=thresholds.kv_cache_usage,
                preemptions=preempted, window_s=thresholds.kv_cache_window_s, window_end=end,
            ),
            workload=item.workload, discriminator=item.model,
        ))
    return found
