"""A Prometheus text 0.0.4 or OpenMetrics 1.0 scrape (what `curl` of dcgm-exporter or a
vLLM `/metrics` returns) -> `Series`, one per sample line.

Parsing is `prometheus_client`'s (`parser.text_string_to_metric_families` for 0.0.4,
`openmetrics.parser.text_string_to_metric_families` for OpenMetrics), never by hand. The
format is chosen from the media type (`application/openmetrics-text` is OpenMetrics,
anything else the 0.0.4 text format). A sample without its own timestamp gets the scrape
time (`scraped_at_ms`, the time the caller received the body).

Each sample keeps its own name (`x_total`, `x_bucket`, `x_sum`…) and its family's kind, so
histogram buckets arrive as `x_bucket{le="…"}` series as they would through remote write.
A line prometheus-client cannot parse raises `PrometheusTextError` with its message; the
parser stops at the first such line, as Prometheus' own scraper does, so a body that is
no exposition is refused whole. A line that parses but holds a value storage cannot keep
is rejected alone (`Scrape.rejected`: its line number and why) and the other samples are
kept (see `series_checks`): a timestamp outside the accepted window (2^70 s, or further
from the time of receipt `now_ms` than the limits allow), a name or label that holds a
NUL, is not UTF-8 (the body is decoded with `surrogateescape`, so only the lines holding
bad bytes are lost) or is too long. NaN samples are legal and dropped (`nan_samples`);
infinities are kept, as Prometheus keeps them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from trustrank.parsers.errors import ParserError
from trustrank.parsers.otlp_metrics_model import OtlpLimits
from trustrank.parsers.series import Labels, MetricKind, Series
from trustrank.parsers.series_checks import (
    labels_problem,
    name_problem,
    sample_window,
    timestamp_problem,
)

OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain"
# Rejected lines a `Scrape` names (and so the receiver's answer); the rest are counted.
MAX_NAMED_REJECTIONS = 100

_KINDS = {
    "counter": MetricKind.COUNTER, "gauge": MetricKind.GAUGE,
    "histogram": MetricKind.HISTOGRAM, "gaugehistogram": MetricKind.HISTOGRAM,
    "summary": MetricKind.SUMMARY, "info": MetricKind.INFO, "stateset": MetricKind.STATESET,
}


class PrometheusTextError(ParserError):
    """The body is not a Prometheus text or OpenMetrics exposition."""


@dataclass(frozen=True, slots=True)
class RejectedLine:
    line: int  # 1-based line of the body; 0 when it could not be told
    sample: str
    problem: str

    def as_dict(self) -> dict[str, Any]:
        # Bytes that were not UTF-8 are shown escaped: a JSON answer cannot carry them.
        sample = self.sample[:120].encode("utf-8", "backslashreplace").decode("utf-8")
        return {"line": self.line, "sample": sample, "problem": self.problem}


@dataclass(frozen=True, slots=True)
class Scrape:
    series: tuple[Series, ...]
    families: int
    # NaN samples: legal in the format (a gauge "not known now"), kept out of storage.
    nan_samples: int
    rejected_samples: int = 0
    rejected: tuple[RejectedLine, ...] = ()

    def message(self) -> str:
        if not self.rejected_samples:
            return ""
        shown = "; ".join(f"line {r.line}: {r.problem}" for r in self.rejected[:5])
        return f"{self.rejected_samples} samples rejected: {shown}"


def _timestamp_ms(timestamp: Any, default: int) -> int | None:
    """The sample's time in ms; None for a time that is no finite number."""
    if timestamp is None:
        return default
    if hasattr(timestamp, "sec") and hasattr(timestamp, "nsec"):
        return int(timestamp.sec) * 1000 + int(timestamp.nsec) // 1_000_000
    seconds = float(timestamp)
    return round(seconds * 1000) if math.isfinite(seconds) else None


def _sample_lines(text: str) -> list[int]:
    """The line number of each sample line, in order (prometheus-client splits on "\\n"
    and yields the samples in the order of their lines)."""
    return [number for number, line in enumerate(text.split("\n"), start=1)
            if line.strip() and not line.lstrip().startswith("#")]


def _exposed_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        line = line.lstrip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(None, 1)[0])
    return names


def prometheus_text_parse(
    *, body: bytes, scraped_at_ms: int, media_type: str = TEXT, now_ms: int | None = None,
    limits: OtlpLimits | None = None,
) -> Scrape:
    """Parse one scrape; raises `PrometheusTextError` for anything prometheus-client
    refuses. `now_ms`, the time of receipt, bounds the samples' own timestamps."""
    limits = limits or OtlpLimits()
    window = sample_window(now_ms, limits)
    text = body.decode("utf-8", "surrogateescape")
    openmetrics = media_type.split(";", 1)[0].strip().lower() == OPENMETRICS
    series: list[Series] = []
    families = nan = rejected = 0
    # (index of the sample, its name, the problem); line numbers are found at the end.
    named: list[tuple[int, str, str]] = []
    # Verdicts per distinct name and label set: a dcgm scrape repeats them a thousandfold.
    names: dict[str, str | None] = {}
    label_sets: dict[Labels, str | None] = {}
    index = -1
    try:
        parsed = (
            openmetrics_parser.text_string_to_metric_families(text)
            if openmetrics else text_string_to_metric_families(text)
        )
        exposed: set[str] | None = None
        for family in parsed:
            families += 1
            kind = _KINDS.get(family.type, MetricKind.UNKNOWN)
            for sample in family.samples:
                index += 1
                value = float(sample.value)
                if math.isnan(value):
                    nan += 1
                    continue
                name = sample.name
                labels = tuple(sorted(sample.labels.items()))
                if name not in names:
                    names[name] = name_problem(name, limits)
                problem = names[name]
                if problem is None:
                    if labels not in label_sets:
                        label_sets[labels] = labels_problem(labels, limits)
                    problem = label_sets[labels]
                timestamp = _timestamp_ms(sample.timestamp, scraped_at_ms)
                if problem is None:
                    problem = ("timestamp is not a finite number" if timestamp is None
                               else timestamp_problem(timestamp, window))
                if problem is not None or timestamp is None:
                    rejected += 1
                    if len(named) < MAX_NAMED_REJECTIONS:
                        named.append((index, name, problem or ""))
                    continue
                if not openmetrics and kind is MetricKind.COUNTER and name.endswith("_total"):
                    # prometheus-client appends _total to a 0.0.4 counter that lacks it
                    # (dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION); keep the
                    # name as exposed, as Prometheus and remote write do.
                    if exposed is None:
                        exposed = _exposed_names(text)
                    if name not in exposed:
                        name = name.removesuffix("_total")
                series.append(Series(
                    name=name, labels=labels, kind=kind, timestamps_ms=(timestamp,),
                    values=(value,), unit=getattr(family, "unit", "") or "",
                    help=family.documentation or "",
                ))
    except PrometheusTextError:
        raise
    except Exception as exc:
        # prometheus-client raises ValueError for most bad lines but IndexError, KeyError
        # and TypeError for some truncated ones; all mean the same to the caller.
        which = "OpenMetrics" if openmetrics else "Prometheus text"
        raise PrometheusTextError(f"not a valid {which} exposition: {exc!r}") from exc
    lines: list[int] = []
    if named:
        lines = _sample_lines(text)
        if len(lines) != index + 1:
            lines = []  # an exposition read otherwise than line by line: no numbers
    return Scrape(
        series=tuple(series), families=families, nan_samples=nan, rejected_samples=rejected,
        rejected=tuple(RejectedLine(line=lines[at] if lines else 0, sample=name,
                                    problem=problem) for at, name, problem in named),
    )
