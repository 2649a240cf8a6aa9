"""OTLP metrics parse benchmark (the pure parser only; no receiver, no storage).

Builds one ExportMetricsServiceRequest shaped like an OpenTelemetry Collector's
prometheus receiver scraping dcgm-exporter on every node: 1,000 resources (nodes) × 40
metrics (every fifth a cumulative sum) × 8 points (GPUs) = 320,000 number points, each with
dcgm-exporter's nine labels. The serialized body is parsed by
`trustrank.parsers.otlp_metrics.otlp_metrics_parse` in a fresh process (so its peak
memory is the parse's, not the builder's), `--runs` times.

Figures:
- points_per_s: points / median CPU time of one parse (process time, so a neighbour on the
  shared cores does not count against it); wall_points_per_s the same by wall clock.
- json_points_per_s: the same request as OTLP/JSON (a tenth of the nodes).
- peak_mb: peak resident memory of the parsing process (VmHWM), body included.

Usage: python bench/metrics_parse.py [--nodes 1000 --gpus 8 --series 40 --runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _parse_in_this_process(path: Path, *, runs: int, encoding: str) -> dict[str, object]:
    from trustrank.parsers.otlp_metrics import otlp_metrics_parse

    body = path.read_bytes()
    cpu: list[float] = []
    wall: list[float] = []
    points = 0
    for _ in range(runs):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        parsed = otlp_metrics_parse(body=body, encoding=encoding)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
        points = parsed.accepted_points
        if parsed.rejected_points:
            raise SystemExit(f"unexpected rejections: {parsed.message()}")
        del parsed
    # VmHWM, not getrusage: ru_maxrss survives exec, so a child of the (large) builder
    # process would report the builder's peak.
    status = Path("/proc/self/status").read_text()
    peak_mb = int(status.split("VmHWM:")[1].split()[0]) / 1024
    return {"points": points, "cpu_s": cpu, "wall_s": wall, "peak_mb": peak_mb,
            "body_mb": len(body) / 2**20}


def _child(path: Path, *, runs: int, encoding: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--parse", str(path), "--runs", str(runs), "--encoding", encoding],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--series", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parse")
    parser.add_argument("--encoding", default="application/x-protobuf")
    args = parser.parse_args()
    if args.parse:
        print(json.dumps(_parse_in_this_process(Path(args.parse), runs=args.runs, encoding=args.encoding)))
        return

    from google.protobuf import json_format

    from tests.cluster.otlp_build import dcgm_request

    now = time.time_ns()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        message = dcgm_request(nodes=args.nodes, gpus=args.gpus, series=args.series, time_ns=now)
        proto_path = Path(tmp) / "request.pb"
        proto_path.write_bytes(message.SerializeToString())
        small = dcgm_request(nodes=max(1, args.nodes // 10), gpus=args.gpus, series=args.series, time_ns=now)
        json_path = Path(tmp) / "request.json"
        json_path.write_text(json_format.MessageToJson(small, indent=None))
        del message, small
        print(f"built requests in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        proto = _child(proto_path, runs=args.runs, encoding="application/x-protobuf")
        as_json = _child(json_path, runs=max(1, args.runs // 2), encoding="application/json")

    points = int(proto["points"])  # type: ignore[call-overload]
    cpu = statistics.median(proto["cpu_s"])  # type: ignore[arg-type]
    wall = statistics.median(proto["wall_s"])  # type: ignore[arg-type]
    json_cpu = statistics.median(as_json["cpu_s"])  # type: ignore[arg-type]
    print(
        f"protobuf: {points} points, {proto['body_mb']:.1f} MB, median {cpu * 1000:.0f} ms CPU "
        f"({wall * 1000:.0f} ms wall) of {args.runs} runs: {proto['cpu_s']}",
        file=sys.stderr,
    )
    print(f"json: {as_json['points']} points, {as_json['body_mb']:.1f} MB, median {json_cpu * 1000:.0f} ms CPU",
          file=sys.stderr)
    print(json.dumps({
        "points_per_s": round(points / cpu),
        "wall_points_per_s": round(points / wall),
        "json_points_per_s": round(int(as_json["points"]) / json_cpu),  # type: ignore[call-overload]
        "peak_mb": round(float(proto["peak_mb"])),  # type: ignore[arg-type]
    }))


if __name__ == "__main__":
    main()
