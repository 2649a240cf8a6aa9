"""The demo's GPU cluster: Kubernetes objects, dcgm-exporter and vLLM scrapes over the last
hour (tests/data/demo/gpu-*; their PROVENANCE.md says where each comes from).

The scrape files are one exposition each, as `curl` of the exporter returns it. The demo
sends them once per five-minute slot of the last hour, each sample stamped with its slot's
time: gauges swing gently around the file's value (framebuffer sizes stay as they are),
counters and histogram buckets read as counts per hour and grow with the time since a fixed
origin, so they never go back between two starts of the demo and buckets stay cumulative.
"""

from __future__ import annotations

import math
import zlib
from datetime import UTC, datetime

CLUSTER = "demo-gpu"
OBJECTS_FILE = "gpu-cluster-objects.json"
SCRAPE_FILES = ("gpu-dcgm-scrape.txt", "gpu-vllm-metrics.txt")
SLOT_SECONDS = 300
SPAN_SECONDS = 3600
# Counters count from here (a fixed instant: the same slot gives the same value on every run).
ORIGIN = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
_CUMULATIVE_KINDS = ("counter", "histogram", "summary")
_STEADY_PREFIXES = ("DCGM_FI_DEV_FB_",)


def scrape_slots(*, now: float) -> list[int]:
    """Unix seconds of the slots of the last hour, oldest first (aligned to the slot size,
    so two runs of the demo share their slots rather than interleave)."""
    last = int(now) // SLOT_SECONDS * SLOT_SECONDS
    return [last - k * SLOT_SECONDS for k in range(SPAN_SECONDS // SLOT_SECONDS - 1, -1, -1)]


def _families(text: str) -> dict[str, str]:
    kinds = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[:2] == ["#", "TYPE"]:
            kinds[parts[2]] = parts[3]
    return kinds


def _kind(name: str, kinds: dict[str, str]) -> str:
    if name in kinds:
        return kinds[name]
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name.removesuffix(suffix) in kinds:
            return kinds[name.removesuffix(suffix)]
    return "untyped"


def _sample(line: str) -> tuple[str, str, float]:
    """(metric name, the line up to its value, value) of a sample line."""
    if "{" in line:
        end = line.rindex("}") + 1
        return line[: line.index("{")], line[:end], float(line[end:].split()[0])
    name, value = line.split()[:2]
    return name, name, float(value)


def scrape_at(text: str, *, at: int) -> bytes:
    """The exposition `text` as scraped at unix second `at` (module docstring)."""
    kinds = _families(text)
    hours = (at - ORIGIN) / 3600
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            out.append(line)
            continue
        name, head, value = _sample(line)
        if _kind(name, kinds) in _CUMULATIVE_KINDS:
            new = round(value * hours, 3)
        elif name.startswith(_STEADY_PREFIXES):
            new = value
        else:
            phase = zlib.crc32(head.encode()) % 628 / 100
            new = value * (1 + 0.15 * math.sin(2 * math.pi * at / 1800 + phase))
            if name.endswith("_UTIL"):
                new = min(new, 100.0)
            elif name.endswith("_perc"):
                new = min(new, 1.0)
            new = round(new, 4)
        out.append(f"{head} {float(new)!r} {at * 1000}")
    return ("\n".join(out) + "\n").encode()
