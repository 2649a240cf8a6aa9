"""The shadow copy of the OTLP metrics schema (number points and point attributes as plain
bytes; see `otlp_metrics`), label sets decoded once per request from those bytes
(`Labeler`), and the tally of rejected points with where they were (`Tally`)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from trustrank.parsers.otlp_metrics_model import OtlpLimits
from trustrank.parsers.otlp_shadow import shadow_messages
from trustrank.parsers.series import Labels

# --- the shadow schema -----------------------------------------------------------------

_SHADOW_PACKAGE = "trustrank.shadow.otlp.metrics"
_DATA_POINT_MESSAGES = {
    "NumberDataPoint", "HistogramDataPoint", "ExponentialHistogramDataPoint",
    "SummaryDataPoint",
}


def _raw_metrics_field(message: str, field: str) -> bool:
    """Number data points (in Gauge and Sum) and every data point's attributes."""
    return (message in ("Gauge", "Sum") and field == "data_points") or (
        message in _DATA_POINT_MESSAGES and field == "attributes")


ShadowRequest, ShadowNumberPoint, ShadowMetric = shadow_messages(
    metrics_pb2, package=_SHADOW_PACKAGE, file_name="trustrank/shadow/otlp_metrics.proto",
    raw=_raw_metrics_field, request_field="resource_metrics", request_type="ResourceMetrics",
    names=("Request", "NumberDataPoint", "Metric"),
)


def any_str(value: AnyValue) -> str:
    text: str = value.string_value
    if text:
        # Nearly every label is a non-empty string: skip the oneof lookup for it.
        return text
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind is None:
        return ""
    # Arrays and maps: JSON, so the text stays unambiguous and searchable.
    return orjson.dumps(json_format.MessageToDict(value)).decode()


def _plain_string_pair(item: bytes) -> tuple[str, str] | None:
    """The usual KeyValue, {key: short string, value: {string_value: short string}},
    read without building messages; None for anything else (the caller decodes it)."""
    if item[:1] != b"\x0a" or len(item) < 6:
        return None
    key_length = item[1]
    at = 2 + key_length
    if key_length > 127 or item[at:at + 1] != b"\x12" or item[at + 2:at + 3] != b"\x0a":
        return None
    any_length, text_length = item[at + 1], item[at + 3]
    if any_length > 127 or text_length > 127 or any_length != text_length + 2:
        return None
    if at + 4 + text_length != len(item):
        return None
    try:
        return item[2:at].decode(), item[at + 4:].decode()
    except UnicodeDecodeError:
        return None


class Labeler:
    """Decodes attribute bytes to `Labels` with its verdict. Two caches: whole attribute
    sets (one decode per distinct label set in the request) and single KeyValues (a GPU
    model, a namespace or a driver version recurs across thousands of label sets)."""

    def __init__(self, limits: OtlpLimits) -> None:
        self.limits = limits
        self.cache: dict[tuple[bytes, ...], tuple[Labels, str | None]] = {}
        self.pairs: dict[bytes, tuple[tuple[str, str], str | None]] = {}
        # Number points, keyed on the raw bytes after the fixed prefix (whole attribute
        # and flag fields).
        self.rest_cache: dict[bytes, Labels] = {}
        self.unusual: dict[bytes, Unusual] = {}
        self.runs: dict[bytes, Any] = {}

    def check(self, pairs: Iterable[tuple[str, str]]) -> tuple[Labels, str | None]:
        labels = tuple(sorted(pairs))
        for key, value in labels:
            problem = self._pair_problem(key, value)
            if problem is not None:
                return labels, problem
        return labels, None

    def _pair_problem(self, key: str, value: str) -> str | None:
        limit = self.limits.max_label_length
        if not key or len(key) > limit or len(value) > limit:
            return f"label {key[:40]!r} is empty or longer than {limit}"
        if "\x00" in key or "\x00" in value:
            return f"label {key[:40]!r} holds a NUL byte"
        return None

    def _pair(self, item: bytes) -> tuple[tuple[str, str], str | None]:
        got = self.pairs.get(item)
        if got is None:
            pair = _plain_string_pair(item)
            if pair is not None:
                got = (pair, self._pair_problem(*pair))
                self.pairs[item] = got
                return got
            try:
                kv = KeyValue.FromString(item)
                pair = (kv.key, any_str(kv.value))
                got = (pair, self._pair_problem(*pair))
            except DecodeError:
                got = (("", ""), "an attribute is not a valid KeyValue (or not UTF-8)")
            self.pairs[item] = got
        return got

    def from_raw(self, raw: tuple[bytes, ...]) -> tuple[Labels, str | None]:
        got = self.cache.get(raw)
        if got is None:
            checked = [self._pair(item) for item in raw]
            problems = [problem for _, problem in checked if problem is not None]
            labels = tuple(sorted(pair for pair, _ in checked))
            got = self.cache[raw] = (labels, problems[0] if problems else None)
        return got


# (resource index, scope index, metric index, metric name), formatted only on a rejection:
# a dcgm scrape has 40,000 metrics, so a string per metric is measurable.
Where = tuple[int, int, int, str]


@dataclass
class Tally:
    total: int = 0
    rejected: int = 0
    stale: int = 0
    problems: list[str] = field(default_factory=list)

    def reject(self, where: Where, problem: str, count: int = 1) -> None:
        self.rejected += count
        if len(self.problems) < 20:
            r_index, s_index, m_index, name = where
            self.problems.append(
                f"resourceMetrics[{r_index}].scopeMetrics[{s_index}].metrics[{m_index}] "
                f"({name[:60]!r}): {problem}"
            )


class Unusual:
    """A label-cache entry for attribute bytes that are not simply a good label set: a
    stale flag, a problem, or bytes only the general decoder reads right."""

    __slots__ = ("labels", "problem", "slow", "stale")

    def __init__(self, *, labels: Labels = (), problem: str | None = None,
                 slow: bool = False, stale: bool = False) -> None:
        self.labels, self.problem, self.slow, self.stale = labels, problem, slow, stale
