"""OTLP metrics (`ExportMetricsServiceRequest`, protobuf or OTLP/JSON) -> plain data.

Shape (see docs/cluster.md): `ParsedMetrics.resources` holds one `ResourceMetrics` per
resource (its attributes as strings: `k8s.cluster.name`, `k8s.pod.name`, `service.name`…)
with its `Metric`s. A gauge or sum keeps its points *columnar* in `NumberPoints` (parallel
arrays of start/time nanoseconds and float values, plus one interned `Labels` tuple per
point) because that is where the volume is: a dcgm-exporter scrape of 1,000 nodes is
320,000 number points. Histogram, exponential histogram and summary points are few and
stay one frozen dataclass each.

Why the decoding is not the obvious `ExportMetricsServiceRequest.FromString` walk: reading
the nine label attributes of a dcgm point through the protobuf message API costs about
1.6 µs per point, so a scrape would parse at about 170,000 points/s. Instead the request is
decoded with a *shadow* copy of the metrics schema in which number data points and all
point attributes are plain `bytes`. A number point as every mainstream encoder writes it
(fields in number order: start, time, value, then attributes and flags) is read with one
`struct` unpack, and its attribute bytes are the key of a cache of decoded label sets, so
each distinct label set is decoded once per request; when a whole metric's points share
the layout and known label sets, they are decoded together with a few C-level calls. A
point in any other layout (integer values, exemplars, other field orders) goes the
general way through the message API; the result is the same.

OTLP/JSON gauges and sums are read from the decoded JSON into the same columns (protobuf's
json_format would manage about 6,000 points/s); other metric types go through json_format.

Unusable points are counted, never fatal for the request (OTLP partial success): a time
that is zero, older than `max_past_s` or later than `max_future_s` from now; a NaN or
infinite value (storage keeps min/max/sum per minute, which one NaN would poison); a metric
name that is empty, longer than `max_name_length` or holds a NUL; a label key or value
that is too long, holds a NUL or is not UTF-8. Points flagged "no recorded value" (the
Collector's staleness marker) are dropped silently and counted apart, as they are not
errors. A body that does not decode at all raises `OtlpMetricsError`.
"""

from __future__ import annotations

import gc
import time
from operator import itemgetter
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from trustrank.parsers.otlp_metrics_json import json_resources
from trustrank.parsers.otlp_metrics_model import (
    JSON,
    PROTOBUF,
    RESOURCE_LABELS,
    Metric,
    MetricsCheck,
    OtlpLimits,
    OtlpMetricsError,
    ParsedMetrics,
    ResourceMetrics,
)
from trustrank.parsers.otlp_metrics_points import (
    TEMPORALITY,
    metric_read,
    number_points_read,
)
from trustrank.parsers.otlp_metrics_shadow import (
    Labeler,
    ShadowRequest,
    Tally,
    any_str,
)


def _window(now_ns: int | None, limits: OtlpLimits) -> tuple[int, int]:
    now = time.time_ns() if now_ns is None else now_ns
    return (max(1, now - limits.max_past_s * 1_000_000_000),
            now + limits.max_future_s * 1_000_000_000)


def otlp_metrics_parse(
    *, body: bytes, encoding: str = PROTOBUF, now_ns: int | None = None,
    limits: OtlpLimits | None = None,
) -> ParsedMetrics:
    """Decode an ExportMetricsServiceRequest (`encoding` is the media type without
    parameters). Raises `OtlpMetricsError` only when the body as a whole is unusable."""
    if encoding not in (PROTOBUF, JSON):
        raise OtlpMetricsError(f"unsupported encoding {encoding!r}; use {PROTOBUF} or {JSON}")
    limits = limits or OtlpLimits()
    window = _window(now_ns, limits)
    labeler = Labeler(limits)
    tally = Tally()
    read = json_resources if encoding == JSON else _protobuf_resources
    # The cyclic collector runs every few hundred container allocations and, as the
    # result grows, rescans it whole: a third of the parse time for a dcgm scrape,
    # although nothing built here can form a cycle. Paused for the parse only, and left
    # alone when the caller had already paused it.
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        resources = read(body, labeler=labeler, tally=tally, window=window, limits=limits)
    finally:
        if pause:
            gc.enable()
    resources = [_resource_checked(resource, at, labeler=labeler, tally=tally)
                 for at, resource in enumerate(resources)]
    return ParsedMetrics(
        resources=tuple(resources), total_points=tally.total, rejected_points=tally.rejected,
        stale_points=tally.stale, problems=tuple(tally.problems),
    )


def resource_labels_problem(attributes: dict[str, str], labeler: Labeler) -> str | None:
    """What is wrong with the resource attributes `series()` copies onto every point's
    labels (a NUL in `k8s.pod.name` would fail storage as surely as one in a point's)."""
    for key in RESOURCE_LABELS:
        value = attributes.get(key)
        if value is not None:
            problem = labeler._pair_problem(key, value)
            if problem is not None:
                return f"resource attribute {problem.removeprefix('label ')}"
    return None


def _resource_checked(
    resource: ResourceMetrics, at: int, *, labeler: Labeler, tally: Tally
) -> ResourceMetrics:
    """The resource, or it without its points (counted as rejected) when its copied
    attributes are unusable."""
    problem = resource_labels_problem(resource.attributes, labeler)
    if problem is None:
        return resource
    count = sum(metric.point_count for metric in resource.metrics)
    if count:
        tally.reject((at, 0, 0, ""), problem, count)
    return ResourceMetrics(attributes=resource.attributes, metrics=())


def _shadow_request(body: bytes) -> Any:
    """The body decoded with the shadow schema; `OtlpMetricsError` when it does not."""
    try:
        return ShadowRequest.FromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpMetricsError(
            f"body is not a protobuf ExportMetricsServiceRequest: {exc}"
        ) from exc


def _protobuf_resources(
    body: bytes, *, labeler: Labeler, tally: Tally, window: tuple[int, int],
    limits: OtlpLimits,
) -> list[ResourceMetrics]:
    request = _shadow_request(body)
    resources = []
    max_name = limits.max_name_length
    for r_index, resource_metrics in enumerate(request.resource_metrics):
        attributes = {
            kv.key: any_str(kv.value) for kv in resource_metrics.resource.attributes
        }
        metrics: list[Metric] = []
        for s_index, scope_metrics in enumerate(resource_metrics.scope_metrics):
            scope_name = scope_metrics.scope.name
            for m_index, metric in enumerate(scope_metrics.metrics):
                kind = metric.WhichOneof("data")
                name = metric.name
                if (kind == "gauge" or kind == "sum") and 0 < len(name) <= max_name and (
                    "\x00" not in name
                ):
                    # The volume case inline (40,000 metrics in a dcgm scrape).
                    data = metric.gauge if kind == "gauge" else metric.sum
                    raw_points = data.data_points
                    tally.total += len(raw_points)
                    numbers = number_points_read(
                        raw_points, labeler, tally, (r_index, s_index, m_index, name), window
                    )
                    if kind == "gauge":
                        metrics.append(Metric(
                            name, metric.unit, metric.description, "gauge", "", False,
                            scope_name, numbers,
                        ))
                    else:
                        metrics.append(Metric(
                            name, metric.unit, metric.description, "sum",
                            TEMPORALITY.get(data.aggregation_temporality, ""),
                            data.is_monotonic, scope_name, numbers,
                        ))
                    continue
                parsed = metric_read(
                    metric, scope_name=scope_name, labeler=labeler, tally=tally,
                    where=(r_index, s_index, m_index, ""), window=window, limits=limits,
                )
                if parsed is not None:
                    metrics.append(parsed)
        resources.append(ResourceMetrics(attributes=attributes, metrics=tuple(metrics)))
    return resources


# --- checking a request without building its points -----------------------------------
#
# A receiver stores the body and leaves the parse to a worker, but must answer with the
# exact partial-success counts. A request whose data points are all good gauge or sum
# points in one of the two usual layouts is read as whole-request columns
# (`otlp_columns`); anything else is parsed in full, so the counts and problems are those
# of `otlp_metrics_parse` either way. The layouts and the verdicts kept across requests:

LONG_POINT = np.dtype({"names": ["start", "time", "value"], "formats": ["<u8", "<u8", "<f8"],
                        "offsets": [1, 10, 19], "itemsize": 27})
SHORT_POINT = np.dtype({"names": ["time", "value"], "formats": ["<u8", "<f8"],
                         "offsets": [1, 10], "itemsize": 18})
LEAD = itemgetter(0)
# Attribute bytes found good, per limits, kept across requests: a Collector sends the same
# label sets scrape after scrape, and decoding them was a third of a check. Bounded (about
# 15 MB of dcgm label sets); only good verdicts are kept, so a hit is always exact.
CLEAN_RESTS: dict[OtlpLimits, set[bytes]] = {}
CLEAN_RESTS_MAX = 50_000


def otlp_metrics_check(
    *, body: bytes, encoding: str = PROTOBUF, now_ns: int | None = None,
    limits: OtlpLimits | None = None,
) -> MetricsCheck:
    """The counts, problems and clusters `otlp_metrics_parse` would give, for a receiver
    that stores the body for a worker to parse: about a fifth of the parse's time for a
    Collector's protobuf request (read as columns, `otlp_columns`), the full parse for
    anything else. Raises `OtlpMetricsError` exactly when the parse would."""
    from trustrank.parsers.otlp_columns import otlp_metrics_check_columns

    return otlp_metrics_check_columns(body=body, encoding=encoding, now_ns=now_ns,
                                      limits=limits)[0]
