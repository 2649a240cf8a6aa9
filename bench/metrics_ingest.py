"""Cluster metrics ingest benchmark: OTLP receiver -> durable job -> loader -> per-minute
storage (PostgreSQL, day-partitioned), in one process through Django's full request stack.

Requests are shaped like an OpenTelemetry Collector's prometheus receiver scraping
dcgm-exporter: 1,000 nodes × 8 GPUs × 40 series per scrape (every fifth a cumulative sum),
dcgm-exporter's nine labels per point, one resource per node. `--nodes-per-request` nodes
go in one request (default 1: the Collector's batch processor sends per-node batches of a
few hundred points; 1,000 puts the whole scrape, 82 MB, in one request). Several scrapes
(`--scrapes`, 15 s apart) so the later ones take the known-series path.

Figures:
- points_per_s: accepted points / (receiver time + job time), both run serially in this
  one process (a deployment runs gunicorn and the worker side by side, so this is a floor),
  over all scrapes, the first of which creates every series row; the scrapes after it
  (known series, the steady state) are printed on their own line.
- p99_ms: receiver latency per request (authenticate, decode, validate by parsing, store
  the payload durably, answer).
- job_points_per_s: points / job time alone (claim, payload, parse, series lookup, numpy
  rollup per minute, upsert).
- peak_mb: peak resident memory during the timed phases (VmHWM, reset after the bodies of
  each scrape are built, so the builder's garbage does not count).

The Celery enqueue and the debounced diagnosis request are replaced by no-ops: the jobs
run here, one after the other, with `ingest.services.job_run`.

Usage (PostgreSQL on this machine; the benchmark uses a database of its own):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/metrics_ingest.py
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_DB = "trustrank_bench_metrics"


def recreate_database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT,
                   env=dict(os.environ), check=True)


def hwm_reset() -> None:
    # Linux: writing 5 to clear_refs resets the high-water mark to the current RSS.
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def hwm_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--series", type=int, default=40)
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--nodes-per-request", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the job phase")
    args = parser.parse_args()

    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "trustrank.settings",
                       "TRUSTRANK_DB_NAME": BENCH_DB, "TRUSTRANK_TESTING": "1",
                       "LOG_LEVEL": "WARNING", "TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT": "1000000"})
    recreate_database()

    import django

    django.setup()
    from django.test import Client
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    import ingest.loaders.cluster as loaders
    import ingest.services as ingest_services
    from ingest.models import IngestJob, JobStatus
    from tests.cluster.otlp_build import dcgm_request
    from trustrank.accounts.models import Team
    from trustrank.accounts.services import api_key_issue

    ingest_services.job_enqueue_on_commit = lambda job: None  # type: ignore[assignment]
    loaders.cluster_diagnose_request = lambda **kwargs: None  # type: ignore[assignment]

    team = Team.objects.create(name="bench")
    secret = api_key_issue(team=team, name="bench", scopes=["metrics:write"]).secret
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}

    latencies: list[float] = []
    receive_s = jobs_s = steady_s = 0.0
    points = 0
    peak = 0.0
    start_ns = time.time_ns() - args.scrapes * 15_000_000_000
    for scrape in range(args.scrapes):
        whole = dcgm_request(nodes=args.nodes, gpus=args.gpus, series=args.series,
                             time_ns=start_ns + scrape * 15_000_000_000, cluster="bench")
        bodies = []
        resources = list(whole.resource_metrics)
        for at in range(0, len(resources), args.nodes_per_request):
            bodies.append(ExportMetricsServiceRequest(
                resource_metrics=resources[at:at + args.nodes_per_request]
            ).SerializeToString())
        del whole, resources
        hwm_reset()
        began = time.perf_counter()
        for body in bodies:
            sent = time.perf_counter()
            response = client.post("/v1/metrics", data=body,
                                   content_type="application/x-protobuf", **headers)
            latencies.append(time.perf_counter() - sent)
            if response.status_code != 200:
                raise SystemExit(f"receiver answered {response.status_code}: {response.content!r}")
        scrape_receive_s = time.perf_counter() - began
        receive_s += scrape_receive_s
        del bodies
        profiler = cProfile.Profile() if args.profile else None
        began = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        for job_id in IngestJob.objects.filter(status=JobStatus.QUEUED).values_list("pk", flat=True):
            ingest_services.job_run(job_id=str(job_id))
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        scrape_jobs_s = time.perf_counter() - began
        jobs_s += scrape_jobs_s
        if scrape:
            steady_s += scrape_jobs_s + scrape_receive_s
        failed = IngestJob.objects.filter(status=JobStatus.FAILED).first()
        if failed is not None:
            raise SystemExit(f"job failed: {failed.error}")
        done = IngestJob.objects.filter(status=JobStatus.DONE)
        points = sum(j.counts.get("points", 0) for j in done)
        peak = max(peak, hwm_mb())
        print(f"scrape {scrape + 1}/{args.scrapes}: {points:,} points stored so far; "
              f"receive {receive_s:.1f} s, jobs {jobs_s:.1f} s", flush=True)

    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*), sum(count) FROM cluster_metricminute")
        minute_rows, minute_points = cur.fetchone()
    expected = args.nodes * args.gpus * args.series * args.scrapes
    print(f"requests: {len(latencies):,} of {args.nodes_per_request} node(s); points "
          f"{points:,} (expected {expected:,}); minute rows {minute_rows:,} holding "
          f"{minute_points:,} points")
    print(f"receiver: p50 {1000 * percentile(latencies, 0.5):.1f} ms, p99 "
          f"{1000 * percentile(latencies, 0.99):.1f} ms, {points / receive_s:,.0f} points/s")
    print(f"jobs: {points / jobs_s:,.0f} points/s")
    per_scrape = args.nodes * args.gpus * args.series
    if args.scrapes > 1:
        print(f"known series (scrapes 2..{args.scrapes}, receiver + jobs): "
              f"{per_scrape * (args.scrapes - 1) / steady_s:,.0f} points/s; the first scrape "
              "also creates every series row")
    print(json.dumps({"points_per_s": round(points / (receive_s + jobs_s)),
                      "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
                      "peak_mb": round(peak, 1)}))


if __name__ == "__main__":
    main()
