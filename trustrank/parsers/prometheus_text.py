"""A Prometheus text 0.0.4 or OpenMetrics 1.0 scrape (what `curl` of dcgm-exporter or a
vLLM `/metrics` returns) -> `Series`, one per sample line.

Parsing is `prometheus_client`'s (`parser.text_string_to_metric_families` for 0.0.4,
`openmetrics.parser.text_string_to_metric_families` for OpenMetrics), never by hand. The
format is chosen from the media type (`application/openmetrics-text` is OpenMetrics,
anything else the 0.0.4 text format). A sample without its own timestamp gets the scrape
time (`scraped_at_ms`, the time the caller received the body).

Each sample keeps its own name (`x_total`, `x_bucket`, `x_sum`…) and its family's kind, so
histogram buckets arrive as `x_bucket{le="…"}` series as they would through remote write.
Any parser failure, including a body that is not UTF-8, raises `PrometheusTextError` with
prometheus-client's message; the parser stops at the first bad line, as Prometheus' own
scraper does, so a scrape is taken whole or not at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from trustrank.parsers.errors import ParserError
from trustrank.parsers.series import MetricKind, Series

OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain"

_KINDS = {
    "counter": MetricKind.COUNTER, "gauge": MetricKind.GAUGE,
    "histogram": MetricKind.HISTOGRAM, "gaugehistogram": MetricKind.HISTOGRAM,
    "summary": MetricKind.SUMMARY, "info": MetricKind.INFO, "stateset": MetricKind.STATESET,
}


class PrometheusTextError(ParserError):
    """The body is not a Prometheus text or OpenMetrics exposition."""


@dataclass(frozen=True, slots=True)
class Scrape:
    series: tuple[Series, ...]
    families: int
    # NaN samples: legal in the format (a gauge "not known now"), kept out of storage.
    nan_samples: int


def _timestamp_ms(timestamp: Any, default: int) -> int:
    if timestamp is None:
        return default
    if hasattr(timestamp, "sec") and hasattr(timestamp, "nsec"):
        return int(timestamp.sec) * 1000 + int(timestamp.nsec) // 1_000_000
    return round(float(timestamp) * 1000)


def _exposed_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        line = line.lstrip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(None, 1)[0])
    return names


def prometheus_text_parse(*, body: bytes, scraped_at_ms: int, media_type: str = TEXT) -> Scrape:
    """Parse one scrape; raises `PrometheusTextError` for anything prometheus-client
    refuses."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PrometheusTextError(f"body is not UTF-8: {exc}") from exc
    openmetrics = media_type.split(";", 1)[0].strip().lower() == OPENMETRICS
    series: list[Series] = []
    families = nan = 0
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
                value = float(sample.value)
                if math.isnan(value):
                    nan += 1
                    continue
                name = sample.name
                if not openmetrics and kind is MetricKind.COUNTER and name.endswith("_total"):
                    # prometheus-client appends _total to a 0.0.4 counter that lacks it
                    # (dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION); keep the
                    # name as exposed, as Prometheus and remote write do.
                    if exposed is None:
                        exposed = _exposed_names(text)
                    if name not in exposed:
                        name = name.removesuffix("_total")
                series.append(Series(
                    name=name, labels=tuple(sorted(sample.labels.items())), kind=kind,
                    timestamps_ms=(_timestamp_ms(sample.timestamp, scraped_at_ms),),
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
    return Scrape(series=tuple(series), families=families, nan_samples=nan)
