"""I/O throttling of inference (formula 13) and the cgroup v2 `io.max` line to apply.

Input per block device as seen by an inference pod: its I/O wait per sampling period
(ms; e.g. node-exporter's `rate(node_disk_io_time_weighted_seconds_total)` per read/write
or the cgroup's `io.pressure`), the device queue utilisation (%; node-exporter's
`rate(node_disk_io_time_seconds_total)` × 100) and the observed peak rates of the
neighbour cgroup that competes for the device (from its `io.stat` deltas).

The limit: the neighbour is capped at `io_limit_share` (default half) of each of its
observed peak rates (read/write bytes/s and IOs/s), rounded down to whole MiB/s and whole
IOs/s, never below `io_min_bps` / `io_min_iops` so the neighbour slows rather than stalls.
A rate the neighbour never used (0) is left unlimited (`max`), as io.max allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trustrank.risk.cluster.findings import Diagnosis, Samples, Severity, SubjectKind, evidence
from trustrank.risk.cluster.settings import DEFAULT_THRESHOLDS, ClusterThresholds

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class IoDevice:
    subject: str  # the inference pod, namespace/pod
    device: str  # MAJ:MIN
    wait_ms: Samples  # one value per sampling period
    queue_percent: Samples
    neighbour: str = ""  # the cgroup path or pod to limit
    neighbour_rbps: float = 0.0
    neighbour_wbps: float = 0.0
    neighbour_riops: float = 0.0
    neighbour_wiops: float = 0.0
    workload: str = ""
    # 0: `queue_percent` samples are instants. Otherwise each is the mean over the period of
    # this many seconds that ends at its time (per-minute storage), so a run covers from its
    # first sample's period start: a minute whose mean is ≥ 90 % holds a 2 s stretch at
    # ≥ 90 % (busy ≥ 54 of 60 s leaves at most 29 of its 30 two-second slices spoiled).
    period_s: float = 0.0


def io_max_line(*, device: IoDevice, thresholds: ClusterThresholds = DEFAULT_THRESHOLDS) -> str:
    share = thresholds.io_limit_share

    def bps(observed: float) -> str:
        if observed <= 0:
            return "max"
        limited = int(observed * share) // _MIB * _MIB
        return str(max(thresholds.io_min_bps, limited))

    def iops(observed: float) -> str:
        if observed <= 0:
            return "max"
        return str(max(thresholds.io_min_iops, int(observed * share)))

    return (
        f"{device.device} rbps={bps(device.neighbour_rbps)} wbps={bps(device.neighbour_wbps)} "
        f"riops={iops(device.neighbour_riops)} wiops={iops(device.neighbour_wiops)}"
    )


def _wait_run(samples: Samples, limit: float, periods: int) -> tuple[float, ...] | None:
    """The first `periods` consecutive samples all above the limit, or None."""
    run: list[float] = []
    for _, value in sorted(samples):
        run = [*run, value] if value > limit else []
        if len(run) >= periods:
            return tuple(run)
    return None


def _queue_run(
    samples: Samples, limit: float, duration: float, period: float = 0.0,
) -> tuple[float, float] | None:
    """(start, end) of the first stretch of samples at or above the limit lasting at
    least `duration` seconds, or None; a sample covers the `period` before its time."""
    start: float | None = None
    for t, value in sorted(samples):
        if value >= limit:
            start = t - period if start is None else start
            if t - start >= duration:
                return start, t
        else:
            start = None
    return None


def io_throttling_diagnose(
    *, devices: Iterable[IoDevice], thresholds: ClusterThresholds = DEFAULT_THRESHOLDS,
) -> list[Diagnosis]:
    found = []
    for device in devices:
        waits = _wait_run(device.wait_ms, thresholds.io_wait_ms, thresholds.io_wait_periods)
        queue = _queue_run(
            device.queue_percent, thresholds.io_queue_percent, thresholds.io_queue_duration_s,
            device.period_s,
        )
        if waits is None and queue is None:
            continue
        line = io_max_line(device=device, thresholds=thresholds)
        why = (
            f"I/O wait above {thresholds.io_wait_ms:g} ms for {len(waits)} periods"
            if waits is not None else
            f"device queue ≥ {thresholds.io_queue_percent:g}% for "
            f"{queue[1] - queue[0]:g} s"  # type: ignore[index]
        )
        found.append(Diagnosis(
            kind="io_throttling", subject_kind=SubjectKind.DEVICE,
            subject=f"{device.subject}@{device.device}",
            severity=Severity.HIGH if waits is not None and queue is not None
            else Severity.MEDIUM,
            title=(
                f"{device.subject} on {device.device}: {why}; "
                f"limit {device.neighbour or 'the neighbour'}"
            ),
            evidence=evidence(
                wait_ms=list(waits) if waits else [], wait_limit_ms=thresholds.io_wait_ms,
                periods=thresholds.io_wait_periods,
                queue_run=list(queue) if queue else [],
                queue_limit_percent=thresholds.io_queue_percent,
                queue_duration_s=thresholds.io_queue_duration_s,
                neighbour=device.neighbour, io_max=line, limit_share=thresholds.io_limit_share,
            ),
            workload=device.workload,
        ))
    return found
