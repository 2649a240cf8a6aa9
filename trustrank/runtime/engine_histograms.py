"""Call latency as a log-linear histogram: 4 sub-buckets per power of two of microseconds,
128 buckets, at most ~12 % relative error. Histograms of any set of time buckets add up,
and p50/p95/p99 are read over any window."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

HIST_BUCKETS = 128


def hist_index(us: int) -> int:
    """Log-linear bucket of a duration in microseconds (4 sub-buckets per power of two)."""
    if us < 4:
        return max(us, 0)
    bits = us.bit_length()
    idx = (bits - 2) * 4 + ((us >> (bits - 3)) & 3)
    return idx if idx < HIST_BUCKETS else HIST_BUCKETS - 1


def hist_bounds_us(idx: int) -> tuple[int, int]:
    """[lower, upper) microseconds of a histogram bucket."""
    if idx < 4:
        return idx, idx + 1
    bits = idx // 4 + 2
    sub = idx % 4
    return (4 + sub) << (bits - 3), (5 + sub) << (bits - 3)


def hist_to_list(hist: Mapping[int, int]) -> list[int]:
    """Dense form, trailing zeros trimmed (what the database stores)."""
    if not hist:
        return []
    out = [0] * (max(hist) + 1)
    for idx, count in hist.items():
        out[idx] += count
    return out


def hist_merge(histograms: Iterable[Iterable[int]]) -> list[int]:
    total: list[int] = []
    for hist in histograms:
        for idx, count in enumerate(hist or ()):
            if idx >= len(total):
                total.extend([0] * (idx + 1 - len(total)))
            total[idx] += int(count or 0)
    return total


def hist_percentiles(
    hist: list[int], quantiles: Iterable[float] = (0.5, 0.95, 0.99)
) -> dict[float, float | None]:
    """Percentiles in milliseconds (bucket midpoints) from a dense histogram."""
    total = sum(hist)
    result: dict[float, float | None] = {}
    for q in quantiles:
        if not total:
            result[q] = None
            continue
        rank = max(1, int(q * total + 0.999999))
        seen = 0
        for idx, count in enumerate(hist):
            seen += count
            if seen >= rank:
                low, high = hist_bounds_us(idx)
                result[q] = round((low + high) / 2 / 1000, 3)
                break
    return result
