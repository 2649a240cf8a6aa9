"""Inline SVG for the project page, drawn server-side as the cluster and identity pages draw
theirs: geometry here, the template only draws (templates/cluster/_line_chart.html for the
line, templates/inventory/_bar_chart.html for the bars)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trustrank.cluster.charts import COLOURS, LineChart, Series, Tick
from trustrank.inventory.selectors import Mttr, OpenPoint

_SEVERITY_COLOURS = {
    "critical": "#b3261e",
    "high": "#D55E00",
    "medium": "#E69F00",
    "low": "#0072B2",
    "none": "#5b6478",
    "unknown": "#5b6478",
}


def _nice_ceiling(value: float) -> float:
    """1, 2, 5 × 10^k at or above value (at least 1)."""
    if value <= 1:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 < value:
        magnitude *= 10
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return float(step * magnitude)
    return float(10 * magnitude)


def open_findings_chart(
    points: Sequence[OpenPoint], *, width: int = 720, height: int = 240
) -> LineChart | None:
    """Open findings per day; None when there are no days."""
    if not points:
        return None
    left, top, right, bottom = 56, 12, 100, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = _nice_ceiling(max(p.open for p in points))
    span = max(len(points) - 1, 1)

    def sx(i: float) -> float:
        return left + plot_w * i / span

    def sy(v: float) -> float:
        return top + plot_h * (1 - v / top_value)

    line = " ".join(f"{sx(i):.1f},{sy(p.open):.1f}" for i, p in enumerate(points))
    series = (Series("open", COLOURS[0], line, sy(points[-1].open)),)
    tick_at = sorted({round(span * k / 4) for k in range(5)})
    x_ticks = tuple(Tick(sx(i), points[i].day.strftime("%m-%d")) for i in tick_at)
    y_ticks = tuple(Tick(sy(top_value * k / 4), f"{top_value * k / 4:g}") for k in range(5))
    return LineChart(
        width=width, height=height, left=left, top=top, plot_w=plot_w, plot_h=plot_h,
        series=series, x_ticks=x_ticks, y_ticks=y_ticks, x_label="day (UTC)",
        y_label="Open findings", marker_x=None,
    )


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    count: int
    x: float
    y: float
    width: float
    height: float
    label_x: float
    colour: str


def mttr_chart(mttr: Mttr, *, width: int = 480, height: int = 200) -> dict[str, Any] | None:
    """Bars of mean days to remediate per severity; None when nothing was resolved."""
    if not mttr.by_severity:
        return None
    pad, bottom = 24, 28
    usable = height - pad - bottom
    peak = _nice_ceiling(max(v["days"] for v in mttr.by_severity.values()) or 1.0)
    slot = (width - 2 * pad) / len(mttr.by_severity)
    bars = []
    for i, (severity, v) in enumerate(mttr.by_severity.items()):
        h = round(usable * v["days"] / peak, 1)
        bars.append(
            Bar(
                label=severity,
                value=v["days"],
                count=v["resolved"],
                x=round(pad + i * slot + 6, 1),
                y=round(height - bottom - h, 1),
                width=round(slot - 12, 1),
                height=h,
                label_x=round(pad + i * slot + slot / 2, 1),
                colour=_SEVERITY_COLOURS.get(severity, "#5b6478"),
            )
        )
    return {"bars": bars, "width": width, "height": height, "axis_y": height - bottom}
