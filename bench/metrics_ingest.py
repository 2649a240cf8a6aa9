"""Cluster metrics ingest benchmark: OTLP receiver -> durable job -> loader -> per-minute
storage (PostgreSQL, day-partitioned), with the receiver and the worker side by side in
two processes, as deployed (gunicorn and a Celery worker, one core each here).

Requests are shaped like an OpenTelemetry Collector's prometheus receiver scraping
dcgm-exporter: 1,000 nodes × 8 GPUs × 40 series per scrape (every fifth a cumulative sum),
dcgm-exporter's nine labels per point, one resource per node. `--nodes-per-request` nodes
go in one request. The default, 25 nodes (8,000 points), is what a stock Collector sends:
its batch processor's `send_batch_size` defaults to 8,192 data points, and a batch is
sent once that many have gathered (or its 200 ms timeout passes), so a scrape of a large
cluster leaves the Collector in requests of about 8,192 points. `--nodes-per-request 1`
is a Collector without the batch processor (one request per node scrape, 320 points).
Bodies are gzipped (`--no-gzip` sends them plain), as the Collector's otlphttp exporter
compresses by default. Several scrapes (`--scrapes`, 15 s apart in their timestamps, sent back to back) so the
later ones take the known-series path.

The request bodies are built first by a separate process into a file; then the receiver
process posts them one after the other through Django's full request stack (test
client), while the worker process runs the queued jobs as a Celery worker would (oldest
first; a job that finds itself already stored by another job's batch costs only its
claim). The Celery enqueue and the debounced diagnosis request are no-ops.

Figures:
- points_per_s: stored points / wall time from the first request sent to the last job
  done (every point in its minute).
- p99_ms: receiver latency per request (authenticate, decode, validate by parsing, store
  the payload durably, answer). Before the clock starts the receiver process answers one
  request of the kind a Collector sends when it has nothing to export: the bench's key, a
  gzip body of an empty ExportMetricsServiceRequest (0 points: no job, nothing stored, not
  counted in any figure). A server that has answered anything has loaded its URLconf and
  views; one that an exporter talks to has also read the key lately (the receivers trust a
  good key for TRUSTRANK_API_KEY_CACHE_SECONDS, 5 s) and its database session has met the
  key and team tables. The first timed request still pays the first job insert of its
  database session.
- peak_mb: the larger peak resident memory (VmHWM) of the two processes; both are printed.
- cpu: seconds of CPU of the receiver, the worker and each one's PostgreSQL backend
  (from /proc), and their sum per point: the figure to compare changes by on a shared
  machine, where wall time depends on the neighbours.

Usage (PostgreSQL on this machine; the benchmark uses a database of its own):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/metrics_ingest.py
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import json
import os
import pstats
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB = "trustrank_bench_metrics"
_LENGTH = struct.Struct("<I")


def recreate_database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT,
                   env=dict(os.environ), check=True)


def hwm_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def environment() -> None:
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "trustrank.settings",
                       "TRUSTRANK_DB_NAME": BENCH_DB, "TRUSTRANK_TESTING": "1",
                       "LOG_LEVEL": "WARNING", "TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT": "1000000"})


def django_setup() -> None:
    environment()
    import django

    django.setup()
    import ingest.loaders.cluster as loaders
    import ingest.services as ingest_services

    ingest_services.job_enqueue_on_commit = lambda job: None  # type: ignore[assignment]
    loaders.cluster_diagnose_request = lambda **kwargs: None  # type: ignore[assignment]


def backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def build(args: argparse.Namespace) -> None:
    """Write every request body, length-prefixed, to args.bodies."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    from tests.cluster.otlp_build import dcgm_request

    start_ns = time.time_ns() - args.scrapes * 15_000_000_000
    with open(args.bodies, "wb") as out:
        for scrape in range(args.scrapes):
            whole = dcgm_request(nodes=args.nodes, gpus=args.gpus, series=args.series,
                                 time_ns=start_ns + scrape * 15_000_000_000, cluster="bench")
            resources = list(whole.resource_metrics)
            for at in range(0, len(resources), args.nodes_per_request):
                body = ExportMetricsServiceRequest(
                    resource_metrics=resources[at:at + args.nodes_per_request]
                ).SerializeToString()
                if args.gzip:
                    body = gzip.compress(body, compresslevel=1)
                out.write(_LENGTH.pack(len(body)) + body)


def receive(args: argparse.Namespace) -> None:
    django_setup()
    from django.test import Client

    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {args.secret}"}
    if args.gzip:
        headers["HTTP_CONTENT_ENCODING"] = "gzip"
    # A served process has its URLconf and views loaded, and one an exporter talks to has
    # its key at hand: an empty export before the clock starts (0 points, stores nothing).
    warm = client.post("/v1/metrics", data=gzip.compress(b""),
                       content_type="application/x-protobuf",
                       **{**headers, "HTTP_CONTENT_ENCODING": "gzip"})
    if warm.status_code != 200:
        raise SystemExit(f"receiver answered the empty export {warm.status_code}: "
                         f"{warm.content!r}")
    pid = backend_pid()
    cpu0, db0 = time.process_time(), cpu_of(pid)
    latencies = []
    first = 0.0
    with open(args.bodies, "rb") as source:
        while head := source.read(4):
            body = source.read(_LENGTH.unpack(head)[0])
            sent = time.time()
            first = first or sent
            response = client.post("/v1/metrics", data=body,
                                   content_type="application/x-protobuf", **headers)
            latencies.append(time.time() - sent)
            if response.status_code != 200:
                raise SystemExit(f"receiver answered {response.status_code}: "
                                 f"{response.content!r}")
    print(json.dumps({"first": first, "last": time.time(), "latencies": latencies,
                      "cpu": time.process_time() - cpu0, "db_cpu": cpu_of(pid) - db0,
                      "peak_mb": hwm_mb()}))


def work(args: argparse.Namespace) -> None:
    django_setup()
    import ingest.services as ingest_services
    from ingest.models import IngestJob, JobStatus

    requests = -(-args.nodes // args.nodes_per_request) * args.scrapes
    pid = backend_pid()
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    cpu0, db0 = time.process_time(), cpu_of(pid)
    runs = idle = 0
    last = time.time()
    while True:
        queued = list(IngestJob.objects.filter(status=JobStatus.QUEUED)
                      .order_by("created_at").values_list("pk", flat=True)[:1])
        if not queued:
            # An idle poll costs one query more, as a worker blocked on its broker costs
            # nothing: the harness must not take the receiver's CPU.
            if IngestJob.objects.exclude(status=JobStatus.QUEUED).exclude(
                    status=JobStatus.RUNNING).count() >= requests:
                failed = IngestJob.objects.filter(status=JobStatus.FAILED).first()
                if failed is not None:
                    raise SystemExit(f"job failed: {failed.error}")
                stored = sum(j.get("points", 0) for j in IngestJob.objects.filter(
                    status=JobStatus.DONE).values_list("counts", flat=True))
                break
            if time.time() - last > 120:
                raise SystemExit(f"no job for 120 s after {runs} job runs")
            idle += 1
            time.sleep(0.005)
            continue
        ingest_services.job_run(job_id=str(queued[0]))
        runs += 1
        last = time.time()
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    print(json.dumps({"last": last, "points": stored, "runs": runs, "idle_polls": idle,
                      "cpu": time.process_time() - cpu0, "db_cpu": cpu_of(pid) - db0,
                      "peak_mb": hwm_mb()}))


def _child(role: str, args: argparse.Namespace, **extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--role", role, "--nodes", str(args.nodes),
               "--gpus", str(args.gpus), "--series", str(args.series),
               "--scrapes", str(args.scrapes), "--nodes-per-request",
               str(args.nodes_per_request), "--bodies", args.bodies,
               "--gzip" if args.gzip else "--no-gzip"]
    for name, value in extra.items():
        command += [f"--{name}", value] if value else [f"--{name}"]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def _result(child: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = child.communicate()
    if child.returncode:
        raise SystemExit(f"{child.args[3]} exited {child.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--series", type=int, default=40)
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--nodes-per-request", type=int, default=25)
    parser.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=True,
                        help="gzip the bodies, as the Collector's otlphttp exporter does "
                        "by default")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the worker (printed to stderr)")
    parser.add_argument("--role", choices=["build", "receive", "work"])
    parser.add_argument("--bodies")
    parser.add_argument("--secret")
    args = parser.parse_args()
    environment()
    if args.role == "build":
        build(args)
        return
    if args.role == "receive":
        receive(args)
        return
    if args.role == "work":
        work(args)
        return

    recreate_database()
    django_setup()
    from trustrank.accounts.models import Team
    from trustrank.accounts.services import api_key_issue

    team = Team.objects.create(name="bench")
    secret = api_key_issue(team=team, name="bench", scopes=["metrics:write"]).secret
    with tempfile.TemporaryDirectory() as tmp:
        args.bodies = str(Path(tmp) / "bodies")
        started = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--role", "build", "--nodes", str(args.nodes),
                        "--gpus", str(args.gpus), "--series", str(args.series), "--scrapes",
                        str(args.scrapes), "--nodes-per-request", str(args.nodes_per_request),
                        "--bodies", args.bodies, "--gzip" if args.gzip else "--no-gzip"],
                       cwd=ROOT, check=True)
        print(f"built {Path(args.bodies).stat().st_size / 2**20:.0f} MB of requests in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        worker = _child("work", args, **({"profile": ""} if args.profile else {}))
        receiver = _child("receive", args, secret=secret)
        got, done = _result(receiver), _result(worker)

    from django.db import connection

    from trustrank.cluster.services.metrics import chunk_records

    with connection.cursor() as cur:
        cur.execute("SELECT data FROM cluster_metricchunk")
        chunks = [chunk_records(bytes(data)) for (data,) in cur.fetchall()]
    minute_rows = sum(len(chunk) for chunk in chunks)
    minute_points = sum(int(chunk["count"].sum()) for chunk in chunks)
    latencies: list[float] = got["latencies"]  # type: ignore[assignment]
    points = int(done["points"])  # type: ignore[call-overload]
    wall = float(done["last"]) - float(got["first"])  # type: ignore[arg-type]
    receive_wall = float(got["last"]) - float(got["first"])  # type: ignore[arg-type]
    expected = args.nodes * args.gpus * args.series * args.scrapes
    cpu = {"receiver": got["cpu"], "receiver_db": got["db_cpu"], "worker": done["cpu"],
           "worker_db": done["db_cpu"]}
    total_cpu = sum(float(v) for v in cpu.values())  # type: ignore[arg-type]
    print(f"requests: {len(latencies):,} of {args.nodes_per_request} node(s); points "
          f"{points:,} (expected {expected:,}); {len(chunks):,} chunks of {minute_rows:,} "
          f"series minutes holding "
          f"{minute_points:,} points; {done['runs']} job runs")
    print(f"receiver: p50 {1000 * percentile(latencies, 0.5):.1f} ms, p99 "
          f"{1000 * percentile(latencies, 0.99):.1f} ms, {points / receive_wall:,.0f} points/s "
          f"while sending; end to end {wall:.1f} s")
    slowest = sorted(range(len(latencies)), key=latencies.__getitem__)[-5:][::-1]
    print("slowest requests (number in sending order: ms): " + ", ".join(
        f"#{i + 1}: {1000 * latencies[i]:.1f}" for i in slowest))
    print("cpu s: " + ", ".join(f"{k} {float(v):.1f}" for k, v in cpu.items())  # type: ignore[arg-type]
          + f"; {1e6 * total_cpu / points:.2f} µs a point, "
          f"{2 * points / total_cpu:,.0f} points/s on two idle cores")
    print(f"peak MB: receiver {float(got['peak_mb']):.0f}, worker "  # type: ignore[arg-type]
          f"{float(done['peak_mb']):.0f}; load {Path('/proc/loadavg').read_text().strip()}")  # type: ignore[arg-type]
    print(json.dumps({"points_per_s": round(points / wall),
                      "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
                      "peak_mb": round(max(float(got["peak_mb"]), float(done["peak_mb"])), 1)}))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
