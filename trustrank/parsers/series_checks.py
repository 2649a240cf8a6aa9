"""What a metric sample must be for storage to hold it, shared by the remote-write and
text-scrape parsers (the OTLP parser applies the same `OtlpLimits` in its own decoder).

A sample is unusable when its time lies outside the accepted window (`sample_window`:
`limits.max_past_s` back and `limits.max_future_s` ahead of the time of receipt, and
never outside what a PostgreSQL timestamp of the day partitions can hold), or when its
name or a label is empty, too long, holds a NUL (PostgreSQL text cannot) or is not UTF-8
(decoded with `surrogateescape`, so the bytes show up as lone surrogates). NaN and
infinite values are legal in Prometheus and are the parsers' own business.
"""

from __future__ import annotations

from trustrank.parsers.otlp_metrics_model import OtlpLimits
from trustrank.parsers.series import Labels

# 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z: a minute outside this has no
# datetime (the chunk's `minute` column) nor a day partition.
STORABLE_MS = (0, 253_402_300_799_999)


def sample_window(now_ms: int | None, limits: OtlpLimits) -> tuple[int, int]:
    """The accepted sample times in ms, inclusive. Without `now_ms` (a unit test, a
    parse with no time of receipt) only what storage can hold."""
    low, high = STORABLE_MS
    if now_ms is None:
        return low, high
    return (max(low, now_ms - limits.max_past_s * 1000),
            min(high, now_ms + limits.max_future_s * 1000))


def timestamp_problem(timestamp_ms: int, window: tuple[int, int]) -> str | None:
    if window[0] <= timestamp_ms <= window[1]:
        return None
    return f"timestamp {timestamp_ms} ms is outside the accepted window"


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "holds a NUL byte"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "is not UTF-8"
    return None


def name_problem(name: str, limits: OtlpLimits) -> str | None:
    if not name or len(name) > limits.max_name_length:
        return f"metric name is empty or longer than {limits.max_name_length}"
    problem = _text_problem(name)
    return None if problem is None else f"metric name {problem}"


def labels_problem(labels: Labels, limits: OtlpLimits) -> str | None:
    """The first thing wrong with a label set, or None."""
    limit = limits.max_label_length
    for key, value in labels:
        if not key or len(key) > limit or len(value) > limit:
            return f"label {key[:40]!r} is empty or longer than {limit}"
        problem = _text_problem(key) or _text_problem(value)
        if problem is not None:
            return f"label {key[:40]!r} {problem}"
    return None
