"""OTLP ingest benchmark: HTTP receiver (gunicorn) -> durable job -> Celery aggregation -> PostgreSQL.

Export requests of 5,000 spans each are built with the real opentelemetry-sdk encoder
(`encode_spans`), posted as application/x-protobuf to POST /v1/traces of a real gunicorn
server, stored as ingest jobs and aggregated by a real Celery worker into PostgreSQL.

Figures:
- spans_per_s: spans posted / (time from the first request to the last job done).
- p99_ms: receiver latency per request (authenticate, decode, validate, store durably,
  answer), measured first with the receiver alone, one client per web worker process, once
  every web worker has seen each distinct body twice (steady state: the first sight of a
  body's span attributes is decoded, later ones are looked up).
- p99_under_load_ms: the same while the worker aggregates on the same two cores and more
  clients than web workers queue (the end-to-end phase).
- aggregate_spans_per_s: spans / summed job run time (one worker process's speed).
- peak_mb: peak resident memory of a worker process aggregating ONE export request of
  1,000,000 spans (the job path: payload from PostgreSQL, decode part by part, aggregate,
  upsert), measured with getrusage in a fresh process.

Usage (PostgreSQL and Redis on this machine; the benchmark uses its own database):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/trustrank \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 python bench/otlp_ingest.py
(BENCH_OTLP_DB=<name> picks another database; the queue prefix is random per run.)
`--team-services 100000` fills the team's graph first, as a large estate's is: a trace job
looks its spans' peers up among the team's services.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Helpers sharing one PostgreSQL pick their own database with BENCH_OTLP_DB.
BENCH_DB = os.environ.get("BENCH_OTLP_DB", "trustrank_bench_otlp")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(prefix: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/trustrank")
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "trustrank.settings",
            "TRUSTRANK_DB_NAME": BENCH_DB,
            "TRUSTRANK_QUEUE_PREFIX": prefix,
            "TRUSTRANK_TESTING": "1",
            "LOG_LEVEL": "WARNING",
            "TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT": "100000",
        }
    )
    return env


def recreate_database(env: dict[str, str]) -> None:
    import psycopg

    url = env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )


def graph_fill(team, *, services: int) -> None:
    """`services` services in the bench spans' environment, one in ten with an alias."""
    from django.db import connection
    from django.utils import timezone

    from trustrank.runtime.models import Environment

    now = timezone.now()
    env = Environment.objects.create(team=team, name="production", first_seen=now,
                                     last_seen=now)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runtime_service (environment_id, kind, namespace, name, version, "
            "attributes, ingress_candidate, first_seen, last_seen, ingress_set_by_label, "
            "ingress_set_via) SELECT %s, 'service', 'estate', 'svc-' || g, '1', '{}', false, "
            "%s, %s, '', '' FROM generate_series(1, %s) AS g",
            [env.id, now, now, services],
        )
        cursor.execute(
            "INSERT INTO runtime_servicealias (environment_id, peer, service_id) "
            "SELECT environment_id, 'alias-' || name, id FROM runtime_service "
            "WHERE environment_id = %s AND id %% 10 = 0",
            [env.id],
        )
        cursor.execute("ANALYZE runtime_service; ANALYZE runtime_servicealias")
    print(f"the team's graph holds {services:,} services before the load")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


MEMORY_PROBE = r"""
import sys, django
django.setup()
from ingest.models import IngestJob
from ingest.services import job_run

def hwm_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024

# Linux carries the parent's RSS high-water mark over fork/exec: reset it (clear_refs 5).
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
job_id = sys.argv[1]
before = hwm_mb("VmRSS:")
job_run(job_id=job_id)
job = IngestJob.objects.get(pk=job_id)
peak = hwm_mb("VmHWM:")
print(json.dumps({"status": job.status, "error": job.error, "spans": job.counts.get("spans"),
                  "seconds": job.duration_seconds, "baseline_mb": before, "peak_mb": peak}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--spans", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--memory-spans", type=int, default=1_000_000)
    parser.add_argument(
        "--team-services", type=int, default=0,
        help="services the team's graph holds before the load (a large estate has 100,000); "
        "the spans' peers are looked up among them",
    )
    parser.add_argument(
        "--per-service", action="store_true",
        help="send each service's spans in requests of their own (as per-service SDK "
        "exporters do) instead of mixed batches (as a Collector does)",
    )
    args = parser.parse_args()

    # SIGTERM (a timeout) must still stop the server and worker in the `finally` below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    prefix = f"bench{uuid.uuid4().hex[:6]}_"
    env = child_env(prefix)
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL",
                                          "TRUSTRANK_DB_NAME", "TRUSTRANK_QUEUE_PREFIX",
                                          "TRUSTRANK_TESTING", "DJANGO_SETTINGS_MODULE",
                                          "TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT", "LOG_LEVEL")})
    recreate_database(env)

    import django

    django.setup()
    import requests
    from _otlp_spans import build_per_service_bytes, build_request_bytes

    from ingest.models import IngestJob, JobStatus
    from ingest.services import job_create
    from trustrank.accounts.models import Team
    from trustrank.accounts.principal import principal_for_key
    from trustrank.accounts.services import api_key_issue

    team = Team.objects.create(name="bench")
    issued = api_key_issue(team=team, name="bench", scopes=["traces:write", "read"])
    if args.team_services:
        graph_fill(team, services=args.team_services)

    distinct = 8
    t0 = time.perf_counter()
    if args.per_service:
        # Three services per trace: 3 x spans per group gives requests of ~`spans` each.
        bodies = [
            body for i in range(distinct)
            for body in build_per_service_bytes(3 * args.spans, seed=i)
        ]
        distinct = len(bodies)
    else:
        bodies = [build_request_bytes(args.spans, seed=i) for i in range(distinct)]
    shape = "one service each" if args.per_service else "services mixed"
    print(f"built {distinct} distinct export requests ({shape}) with the SDK encoder in "
          f"{time.perf_counter() - t0:.1f} s ({len(bodies[0]) / 1e6:.2f} MB each)")

    tmp = ROOT / "var" / "bench"
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    web = start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application", "--bind",
                 f"127.0.0.1:{port}", "--workers", str(args.web_workers), "--timeout", "120"],
                env, tmp / "gunicorn.log")
    worker = None
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/login/", timeout=15)
                break
            except (requests.ConnectionError, requests.Timeout):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

        session_headers = {"Content-Type": "application/x-protobuf",
                           "Authorization": f"Bearer {issued.secret}"}
        local = __import__("threading").local()

        def send(i: int) -> float:
            session = getattr(local, "session", None)
            if session is None:
                session = local.session = requests.Session()
            started = time.perf_counter()
            response = session.post(url, data=bodies[i % distinct], headers=session_headers,
                                    timeout=60)
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"request {i}: HTTP {response.status_code} {response.text}")
            return elapsed

        # Warm every gunicorn worker: its connection, and the span tails it decodes once per
        # distinct value (a Collector sends the same services' attributes request after
        # request; a first sight of each of the bench's few distinct bodies is not that).
        with ThreadPoolExecutor(args.web_workers) as pool:
            list(pool.map(send, range(distinct * args.web_workers * 2)))

        # Phase 1, the receiver alone (no worker consuming yet): authenticate, decode,
        # validate, store durably, answer; one client per web worker process.
        with ThreadPoolExecutor(args.web_workers) as pool:
            alone = list(pool.map(send, range(args.requests)))
        p99_alone = percentile(alone, 0.99) * 1000
        print(f"receiver alone: {args.requests} requests, {args.web_workers} clients: "
              f"p50 {percentile(alone, 0.5) * 1000:.1f} ms, p99 {p99_alone:.1f} ms")
        import redis

        redis.Redis.from_url(env["CELERY_BROKER_URL"]).delete(
            f"{prefix}ingest", f"{prefix}ingest_high"
        )
        IngestJob.objects.all().delete()

        # Phase 2, end to end: the receiver and the aggregation share the machine.
        worker = start([sys.executable, "-m", "celery", "-A", "trustrank", "worker", "-Q",
                        f"{prefix}ingest_high,{prefix}ingest", "-c", str(args.worker_concurrency),
                        "--without-gossip", "--without-mingle", "--without-heartbeat", "-l",
                        "warning"], env, tmp / "worker.log")
        time.sleep(4)  # the worker imports Django and connects to the broker
        started = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            latencies = list(pool.map(send, range(args.requests)))
        sent = time.perf_counter() - started
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        spans_in = [
            sum(len(ss.spans) for rs in ExportTraceServiceRequest.FromString(b).resource_spans
                for ss in rs.scope_spans)
            for b in bodies
        ]
        total_spans = sum(spans_in[i % distinct] for i in range(args.requests))
        give_up = time.monotonic() + 600
        while IngestJob.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).exists():
            if time.monotonic() > give_up:
                raise RuntimeError(f"jobs still pending after 600 s; see {tmp}/worker.log")
            time.sleep(0.05)
        done = time.perf_counter() - started
        failed = IngestJob.objects.filter(status=JobStatus.FAILED).count()
        job_seconds = sum(
            j.duration_seconds or 0 for j in IngestJob.objects.filter(status=JobStatus.DONE)
        )
        aggregated = sum(j.counts.get("spans", 0) for j in IngestJob.objects.all())
        from django.db.models import Sum

        from trustrank.runtime.models import LibraryBucket

        # Frames of the exception events the failing spans carry, counted as library evidence.
        frames = LibraryBucket.objects.filter(kind="python_frame").aggregate(n=Sum("spans"))["n"]
        if not frames:
            raise RuntimeError("no stack frame of the spans' exception events became evidence")
        p99 = percentile(latencies, 0.99) * 1000
        print(f"end to end: posted {args.requests} requests ({total_spans} spans) with "
              f"{args.concurrency} clients in {sent:.2f} s ({total_spans / sent:,.0f} spans/s "
              f"into the receiver while the worker aggregates); p50 "
              f"{percentile(latencies, 0.5) * 1000:.1f} ms, p99 {p99:.1f} ms")
        print(f"all jobs done after {done:.2f} s: {total_spans / done:,.0f} spans/s end to end; "
              f"{aggregated} spans aggregated, {failed} jobs failed; "
              f"job run time {job_seconds:.2f} s ({aggregated / job_seconds:,.0f} spans/s per "
              f"worker process); {frames:,} library sightings from exception stack frames")
    finally:
        stop(web)
        if worker is not None:
            stop(worker)
        import redis

        redis.Redis.from_url(env["CELERY_BROKER_URL"]).delete(
            f"{prefix}ingest", f"{prefix}ingest_high"
        )

    # Memory: one export request of --memory-spans spans through the worker's job path.
    memory_bodies = [build_request_bytes(args.spans, seed=i) for i in range(8)]
    big = b"".join(memory_bodies[i % 8] for i in range(args.memory_spans // args.spans))
    memory_bodies.clear()
    bodies.clear()
    job = job_create(team=team, kind="traces", payload=big,
                     principal=principal_for_key(issued.api_key),
                     params={"encoding": "protobuf"})
    size_mb = len(big) / 1e6
    del big
    probe = subprocess.run(
        [sys.executable, "-c", "import json\n" + MEMORY_PROBE, str(job.id)], cwd=ROOT, env=env,
        capture_output=True, text=True, check=True,
    )
    memory = json.loads(probe.stdout.strip().splitlines()[-1])
    import redis

    # The job above was also enqueued for a worker that is gone: drop those messages.
    redis.Redis.from_url(env["CELERY_BROKER_URL"]).delete(f"{prefix}ingest", f"{prefix}ingest_high")
    print(f"one {args.memory_spans:,}-span export request ({size_mb:.0f} MB protobuf) "
          f"aggregated by the job path in {memory['seconds']:.1f} s: status {memory['status']}, "
          f"{memory['spans']} spans, peak RSS {memory['peak_mb']:.0f} MB "
          f"(process baseline {memory['baseline_mb']:.0f} MB)")
    print(json.dumps({
        "spans_per_s": round(total_spans / done),
        "p99_ms": round(p99_alone, 1),
        "p99_under_load_ms": round(p99, 1),
        "aggregate_spans_per_s": round(aggregated / job_seconds),
        "peak_mb": round(memory["peak_mb"]),
        "load_average": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
