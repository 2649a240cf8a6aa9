"""Prometheus remote write 1.0 (`Content-Encoding: snappy`, protobuf `WriteRequest`) ->
`Series`.

The body is snappy *block* format (not the framed/stream format), decompressed with
`cramjam`. No maintained PyPI package ships the `prometheus.WriteRequest` classes for the
protobuf major versions this project uses, so the few messages remote write 1.0 needs are
declared here with protobuf's descriptor API, field numbers as in Prometheus' `prompb`
(types.proto / remote.proto):

    WriteRequest   { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries     { repeated Label labels = 1; repeated Sample samples = 2;
                     repeated Exemplar exemplars = 3; repeated Histogram histograms = 4; }
    Label          { string name = 1; string value = 2; }
    Sample         { double value = 1; int64 timestamp = 2; }   // ms since the epoch
    MetricMetadata { MetricType type = 1; string metric_family_name = 2;
                     string help = 4; string unit = 5; }

Exemplars are ignored; native histograms (field 4) are counted in
`RemoteWrite.skipped_histograms` and not decoded. Metadata, which Prometheus sends in its
own requests, gives each series its kind, unit and help when present in the same request
and is returned as `metadata` for storage to remember across requests.

Per series: the name comes from `__name__` (a series without one is rejected); staleness
markers (the NaN with bits 0x7ff0000000000002 that Prometheus writes when a series
disappears) are dropped and counted as `stale_samples`; other NaNs are kept out of storage
as rejected samples (`nan_samples` of them), like the OTLP parser does. Infinities are
kept, as Prometheus keeps them.

One bad value never costs the request (`series_checks`): a series whose name or labels
are unusable (NUL, not UTF-8, too long) is rejected whole, a sample whose time is outside
the accepted window alone; both are counted in `rejected_samples` with a problem. Label
names and values are declared `bytes` below, not `string`, so that one label that is not
UTF-8 rejects its series instead of failing the decode of the whole request.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from trustrank.parsers.errors import ParserError
from trustrank.parsers.otlp_metrics_model import OtlpLimits
from trustrank.parsers.series import MetricKind, Series
from trustrank.parsers.series_checks import (
    labels_problem,
    name_problem,
    sample_window,
    timestamp_problem,
)

# Snappy block bodies this large would decompress to hundreds of MB; refuse early.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_STALE_NAN_BITS = 0x7FF0000000000002
_DOUBLE = struct.Struct("<d")
_UINT64 = struct.Struct("<Q")

# prompb MetricMetadata.MetricType numbers.
_METADATA_KINDS = {
    0: MetricKind.UNKNOWN, 1: MetricKind.COUNTER, 2: MetricKind.GAUGE,
    3: MetricKind.HISTOGRAM, 4: MetricKind.HISTOGRAM, 5: MetricKind.SUMMARY,
    6: MetricKind.INFO, 7: MetricKind.STATESET,
}


class RemoteWriteError(ParserError):
    """The body is not a snappy-compressed remote write 1.0 WriteRequest."""


@dataclass(frozen=True, slots=True)
class MetricMetadata:
    family: str
    kind: MetricKind
    help: str
    unit: str


@dataclass(frozen=True, slots=True)
class RemoteWrite:
    series: tuple[Series, ...]
    metadata: tuple[MetricMetadata, ...]
    total_samples: int
    rejected_samples: int
    stale_samples: int
    skipped_histograms: int
    problems: tuple[str, ...]
    nan_samples: int = 0

    @property
    def accepted_samples(self) -> int:
        return self.total_samples - self.rejected_samples - self.stale_samples

    @property
    def wholly_bad(self) -> bool:
        """Nothing to store and something wrong other than NaN values (which Prometheus
        writes legitimately): a request that can never succeed."""
        return not self.series and self.rejected_samples > self.nan_samples

    def message(self) -> str:
        if not self.rejected_samples:
            return ""
        return f"{self.rejected_samples} of {self.total_samples} samples rejected: " + "; ".join(
            self.problems[:5]
        )


def _write_request_class() -> type[Message]:
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="trustrank/prometheus_remote.proto", package="trustrank.prometheus", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        item = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            entry = item.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                entry.type_name = ".trustrank.prometheus." + type_name

    one, many = f.LABEL_OPTIONAL, f.LABEL_REPEATED
        # bytes: a label that is not UTF-8 rejects its series, not the whole request.
    message("Label", ("name", 1, one, f.TYPE_BYTES, ""), ("value", 2, one, f.TYPE_BYTES, ""))
    message("Sample", ("value", 1, one, f.TYPE_DOUBLE, ""), ("timestamp", 2, one, f.TYPE_INT64, ""))
    message(
        "TimeSeries",
        ("labels", 1, many, f.TYPE_MESSAGE, "Label"),
        ("samples", 2, many, f.TYPE_MESSAGE, "Sample"),
        # Exemplars and native histograms are only counted: raw bytes are enough.
        ("exemplars", 3, many, f.TYPE_BYTES, ""),
        ("histograms", 4, many, f.TYPE_BYTES, ""),
    )
    message(
        "MetricMetadata",
        ("type", 1, one, f.TYPE_INT32, ""),
        # bytes too: metadata only describes, so bad text in it is cleaned, not fatal.
        ("metric_family_name", 2, one, f.TYPE_BYTES, ""),
        ("help", 4, one, f.TYPE_BYTES, ""),
        ("unit", 5, one, f.TYPE_BYTES, ""),
    )
    message(
        "WriteRequest",
        ("timeseries", 1, many, f.TYPE_MESSAGE, "TimeSeries"),
        ("metadata", 3, many, f.TYPE_MESSAGE, "MetricMetadata"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("trustrank.prometheus.WriteRequest")
    )


WriteRequest = _write_request_class()


def _is_stale(value: float) -> bool:
    return _UINT64.unpack(_DOUBLE.pack(value))[0] == _STALE_NAN_BITS


def write_request_decompress(body: bytes) -> bytes:
    """Snappy block -> protobuf bytes, with a bound on the size it will expand to."""
    try:
        size = cramjam.snappy.decompress_raw_len(body)
    except Exception as exc:  # cramjam raises its own DecompressionError, not exported
        raise RemoteWriteError(f"body is not snappy block-compressed: {exc}") from exc
    if size > MAX_DECOMPRESSED_BYTES:
        raise RemoteWriteError(
            f"body would decompress to {size} bytes, more than {MAX_DECOMPRESSED_BYTES}"
        )
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:
        raise RemoteWriteError(f"body is not snappy block-compressed: {exc}") from exc


def remote_write_parse(
    *, body: bytes, compressed: bool = True, now_ms: int | None = None,
    limits: OtlpLimits | None = None,
) -> RemoteWrite:
    """Decode a remote write 1.0 body. `compressed=False` takes the protobuf as is (tests,
    or a proxy that already decompressed it); `now_ms`, the time of receipt, bounds the
    sample times (see `series_checks.sample_window`). Raises `RemoteWriteError` for a
    body that is not snappy or not a WriteRequest."""
    limits = limits or OtlpLimits()
    low, high = window = sample_window(now_ms, limits)
    raw = write_request_decompress(body) if compressed else body
    try:
        request: Any = WriteRequest.FromString(raw)
    except (DecodeError, RecursionError) as exc:
        raise RemoteWriteError(f"body is not a protobuf WriteRequest: {exc}") from exc
    metadata = tuple(
        MetricMetadata(
            family=_clean(item.metric_family_name),
            kind=_METADATA_KINDS.get(item.type, MetricKind.UNKNOWN),
            help=_clean(item.help), unit=_clean(item.unit)[:64],
        )
        for item in request.metadata
    )
    by_family = {item.family: item for item in metadata}
    series: list[Series] = []
    problems: list[str] = []
    total = rejected = stale = histograms = nan = 0
    for index, timeseries in enumerate(request.timeseries):
        samples = timeseries.samples
        total += len(samples)
        histograms += len(timeseries.histograms)
        labels = {label.name.decode("utf-8", "surrogateescape"):
                  label.value.decode("utf-8", "surrogateescape")
                  for label in timeseries.labels}
        name = labels.pop("__name__", "")
        sorted_labels = tuple(sorted(labels.items()))
        problem = None
        if not name:
            problem = "no usable __name__ label"
        else:
            problem = name_problem(name, limits) or labels_problem(sorted_labels, limits)
        if problem is not None:
            rejected += len(samples)
            if len(problems) < 20:
                problems.append(f"timeseries[{index}]: {problem}")
            continue
        times: list[int] = []
        values: list[float] = []
        for sample in samples:
            value = sample.value
            if math.isnan(value):
                if _is_stale(value):
                    stale += 1
                else:
                    rejected += 1
                    nan += 1
                    if len(problems) < 20:
                        problems.append(f"timeseries[{index}] ({name[:60]!r}): NaN sample")
                continue
            timestamp = sample.timestamp
            if not low <= timestamp <= high:
                rejected += 1
                if len(problems) < 20:
                    problems.append(f"timeseries[{index}] ({name[:60]!r}): "
                                    f"{timestamp_problem(timestamp, window)}")
                continue
            times.append(timestamp)
            values.append(value)
        if not times:
            continue
        meta = by_family.get(name) or by_family.get(_family(name))
        series.append(Series(
            name=name, labels=sorted_labels,
            kind=meta.kind if meta else MetricKind.UNKNOWN,
            timestamps_ms=tuple(times), values=tuple(values),
            unit=meta.unit if meta else "", help=meta.help if meta else "",
        ))
    return RemoteWrite(
        series=tuple(series), metadata=metadata, total_samples=total,
        rejected_samples=rejected, stale_samples=stale, skipped_histograms=histograms,
        problems=tuple(problems), nan_samples=nan,
    )


def _clean(text: bytes) -> str:
    """Metadata text as storage can hold it: bad UTF-8 replaced, NULs left out."""
    return text.decode("utf-8", "replace").replace("\x00", "")


def _family(name: str) -> str:
    """`x_bucket` / `x_sum` / `x_count` belong to family `x` (metadata names families)."""
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
