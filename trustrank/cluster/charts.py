"""Inline SVG for the replay and cluster pages, drawn server-side (no chart library in the
bundle): the geometry here, the templates only draw."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

# Colour-blind-safe palette (Okabe-Ito), one per strategy in a fixed order.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    points: str  # SVG polyline points
    final_label_y: float


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    series: tuple[Series, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    x_label: str
    y_label: str
    marker_x: float | None

    # The legend sits under the chart, below the x axis and its label, one row per line:
    # never inside the plot or over the tick labels, however many lines there are.
    @property
    def legend(self) -> tuple[LegendRow, ...]:
        return tuple(
            LegendRow(name=s.name, colour=s.colour, y=self.height + LEGEND_ROW * i + 8)
            for i, s in enumerate(self.series)
        )

    @property
    def full_height(self) -> int:
        return self.height + LEGEND_ROW * len(self.series) + 6


LEGEND_ROW = 16


@dataclass(frozen=True)
class LegendRow:
    name: str
    colour: str
    y: float


def unallocated_chart(
    curves: Mapping[str, Sequence[float]], *, width: int = 720, height: int = 360
) -> LineChart:
    """Unallocated GPU share (%) against arrived workload (% of GPU capacity), one line per
    strategy, as the FGD paper plots it; a dashed line marks 100 % arrived."""
    left, top, right, bottom = 56, 12, 120, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    x_max = max((len(c) - 1 for c in curves.values()), default=130) or 1
    y_max_raw = max((max(c) for c in curves.values() if c), default=1.0) * 100
    y_max = max(5.0, _nice_ceiling(y_max_raw))

    def sx(i: float) -> float:
        return left + plot_w * i / x_max

    def sy(v: float) -> float:
        return top + plot_h * (1 - min(v * 100, y_max) / y_max)

    series = []
    for i, (name, curve) in enumerate(curves.items()):
        pts = " ".join(f"{sx(x):.1f},{sy(v):.1f}" for x, v in enumerate(curve))
        final = sy(curve[-1]) if curve else top + plot_h
        series.append(Series(name, COLOURS[i % len(COLOURS)], pts, final))
    # Spread end labels that would overlap.
    placed: list[Series] = []
    for s in sorted(series, key=lambda s: s.final_label_y):
        y = s.final_label_y
        if placed and y - placed[-1].final_label_y < 13:
            y = placed[-1].final_label_y + 13
        placed.append(Series(s.name, s.colour, s.points, y))
    step = 20 if x_max > 60 else 10
    x_ticks = tuple(Tick(sx(x), f"{x}%") for x in range(0, x_max + 1, step))
    y_step = y_max / 5
    y_ticks = tuple(Tick(sy(k * y_step / 100), f"{k * y_step:.0f}%") for k in range(6))
    return LineChart(
        width=width,
        height=height,
        left=left,
        top=top,
        plot_w=plot_w,
        plot_h=plot_h,
        series=tuple(placed),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        x_label="Arrived workload (% of cluster GPU capacity)",
        y_label="Unallocated GPU",
        marker_x=sx(100) if x_max >= 100 else None,
    )


def _nice_ceiling(value: float) -> float:
    for step in (5, 10, 20, 25, 50, 100):
        if value <= step:
            return float(step)
    return float(int(value) + 1)


def time_chart(
    lines: Mapping[str, Sequence[tuple[float, float]]], *, y_label: str,
    y_max: float | None = None, width: int = 720, height: int = 260,
) -> LineChart | None:
    """Values against wall-clock time (unix seconds), one line per label; None when there
    is nothing to draw. `y_max` fixes the scale (100 for percentages, 1 for FI)."""
    lines = {name: points for name, points in lines.items() if points}
    if not lines:
        return None
    left, top, right, bottom = 56, 12, 24, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    t0 = min(p[0][0] for p in lines.values())
    t1 = max(p[-1][0] for p in lines.values())
    span = max(t1 - t0, 60.0)
    top_value = y_max if y_max is not None else _nice_ceiling(
        max(max(v for _, v in p) for p in lines.values()) or 1.0
    )

    def sx(t: float) -> float:
        return left + plot_w * (t - t0) / span

    def sy(v: float) -> float:
        return top + plot_h * (1 - max(0.0, min(v, top_value)) / top_value)

    series = [
        Series(name, COLOURS[i % len(COLOURS)],
               " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in points), sy(points[-1][1]))
        for i, (name, points) in enumerate(lines.items())
    ]
    placed: list[Series] = []
    for s in sorted(series, key=lambda s: s.final_label_y):
        y = s.final_label_y
        if placed and y - placed[-1].final_label_y < 13:
            y = placed[-1].final_label_y + 13
        placed.append(Series(s.name, s.colour, s.points, y))
    x_ticks = tuple(
        Tick(sx(t0 + span * k / 4), datetime.fromtimestamp(t0 + span * k / 4, tz=UTC)
             .strftime("%H:%M"))
        for k in range(5)
    )
    y_ticks = tuple(Tick(sy(top_value * k / 4), f"{top_value * k / 4:g}") for k in range(5))
    return LineChart(
        width=width, height=height, left=left, top=top, plot_w=plot_w, plot_h=plot_h,
        series=tuple(placed), x_ticks=x_ticks, y_ticks=y_ticks, x_label="time (UTC)",
        y_label=y_label, marker_x=None,
    )


@dataclass(frozen=True)
class PriorityRow:
    label: str
    y: float
    declared_x: float
    recommended_x: float
    declared: int
    recommended: int
    direction: str  # raise | lower | keep
    colour: str


@dataclass(frozen=True)
class PriorityChart:
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    rows: tuple[PriorityRow, ...]
    x_ticks: tuple[Tick, ...]


DIRECTION_COLOURS = {"raise": "#D55E00", "lower": "#0072B2", "keep": "#009E73"}


def priorities_chart(
    rows: Sequence[tuple[str, int, int, str]], *, width: int = 720, row_h: int = 22,
) -> PriorityChart | None:
    """Declared beside recommended priority value per workload, (label, declared,
    recommended, direction) each: a grey dot for the declared value, a coloured one for the
    recommended, joined by a line. The axis is logarithmic (0, 1k, 10k … ): priority values
    differ by orders of magnitude, as the recommendation tiers do. None without rows."""
    if not rows:
        return None
    left, top, right, bottom = 230, 28, 24, 30
    plot_w = width - left - right
    plot_h = row_h * len(rows)
    top_value = max(max(d, r) for _, d, r, _ in rows)
    decades = max(3, math.ceil(math.log10(max(top_value, 10))))

    def sx(value: int) -> float:
        scaled = 0.0 if value <= 1 else min(math.log10(value), decades)
        return left + plot_w * scaled / decades

    placed = tuple(
        PriorityRow(label=label, y=top + row_h * i + row_h / 2, declared_x=sx(declared),
                    recommended_x=sx(recommended), declared=declared, recommended=recommended,
                    direction=direction, colour=DIRECTION_COLOURS.get(direction, "#000000"))
        for i, (label, declared, recommended, direction) in enumerate(rows)
    )
    ticks = tuple(Tick(sx(10**k) if k else left, _short(10**k if k else 0))
                  for k in range(0, decades + 1))
    return PriorityChart(width=width, height=top + plot_h + bottom, left=left, top=top,
                         plot_w=plot_w, plot_h=plot_h, rows=placed, x_ticks=ticks)


def _short(value: int) -> str:
    for size, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if value >= size:
            return f"{value // size}{suffix}"
    return str(value)
