"""Fair queues: one team's burst of batch work must not delay another team's SBOM.

Team B posts 50 replay runs and 20 large exports (each a job: more findings than
TRUSTRANK_EXPORT_STREAM_MAX_ROWS), honouring 429 Retry-After as a client should; while its
burst is queued and running, team A uploads 20 SBOMs of 500 components each, one every half
second, as CI pipelines finishing one after another would. Measured: each of A's SBOMs from
upload to its job done (polling the job). A real gunicorn and two Celery workers (solo pool,
`-Q ingest_high,ingest,batch`, as the README's layout runs them; one with beat) on a fresh
database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/fairness.py

Last line: {"a_p95_seconds": …, "a_max_seconds": …, "b_replays": 50, "b_exports": 20, …}
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.findings_list as fl  # noqa: E402

BENCH_DB = "trustrank_bench_fairness"
TRACE = ROOT / "tests" / "data" / "telemetry" / "alibaba"


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    var = ROOT / "var" / "bench-fairness"
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "trustrank.settings",
            "TRUSTRANK_DB_NAME": BENCH_DB,
            "TRUSTRANK_QUEUE_PREFIX": f"bench-fair-{os.getpid()}-",
            "TRUSTRANK_TESTING": "1",
            "TRUSTRANK_CACHE": "file",
            "TRUSTRANK_VAR_DIR": str(var),
            "TRUSTRANK_EXPORT_DIR": str(var / "exports"),
            "TRUSTRANK_EXPORT_STREAM_MAX_ROWS": "500",
            "TRUSTRANK_SWEEP_SECONDS": "5",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def database_prepare(env: dict[str, str], *, b_findings: int) -> dict[str, str]:
    """A fresh database with team A (SBOM uploads) and team B (findings to export, an admin
    key to replay with). Returns the two keys."""
    import subprocess

    import psycopg

    url = env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    os.environ.update(env)
    import django

    django.setup()
    from bench.rerank import build
    from trustrank.accounts.models import Team
    from trustrank.accounts.services import api_key_issue

    team_b = Team.objects.get(pk=build(findings=b_findings, services=40, edges=80,
                                       versions=20, seed=11))
    team_b.name = "team-b"
    team_b.save(update_fields=["name"])
    team_a = Team.objects.create(name="team-a")
    return {
        "a": api_key_issue(team=team_a, name="ci", scopes=["sbom:write", "read"]).secret,
        "b": api_key_issue(team=team_b, name="batch", scopes=["admin", "read"]).secret,
    }


def small_trace(pods: int, nodes: int) -> tuple[bytes, bytes]:
    """The first pods and nodes of the openb trace: a replay of a few seconds."""

    def head(path: Path, rows: int) -> bytes:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            out = io.StringIO()
            writer = csv.writer(out)
            for i, row in enumerate(reader):
                if i > rows:
                    break
                writer.writerow(row)
        return out.getvalue().encode()

    return (head(TRACE / "gpu-v2023_openb_pod_list_default.csv", pods),
            head(TRACE / "gpu-v2023_openb_node_list_gpu_node.csv", nodes))


def sbom(n: int, components: int) -> bytes:
    return json.dumps({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "components": [
            {"type": "library", "name": f"pkg-{n}-{i}", "version": f"1.{i % 7}.{i % 5}",
             "purl": f"pkg:npm/pkg-{n}-{i}@1.{i % 7}.{i % 5}", "bom-ref": f"c{i}"}
            for i in range(components)
        ],
    }).encode()


def post_until_accepted(http: Any, url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """POST, waiting out 429s as their Retry-After says; returns (429s seen, 202 body)."""
    refused = 0
    while True:
        response = http.post(url, timeout=60, **kwargs)
        if response.status_code == 429:
            refused += 1
            time.sleep(float(response.headers.get("Retry-After", "1")))
            continue
        if response.status_code != 202:
            raise SystemExit(f"POST {url}: {response.status_code} {response.text[:300]}")
        return refused, response.json()


def wait_done(http: Any, url: str, *, poll: float, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = http.get(url, timeout=30).json()
        if body["status"] in ("done", "failed"):
            return body
        time.sleep(poll)
    raise SystemExit(f"{url} not finished within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--exports", type=int, default=20)
    parser.add_argument("--sboms", type=int, default=20)
    parser.add_argument("--components", type=int, default=500)
    parser.add_argument("--b-findings", type=int, default=3000)
    # A replay of this much of the openb trace takes a few seconds of a worker.
    parser.add_argument("--trace-pods", type=int, default=3000)
    parser.add_argument("--trace-nodes", type=int, default=400)
    args = parser.parse_args()
    import requests

    env = bench_env()
    keys = database_prepare(env, b_findings=args.b_findings)
    from django.conf import settings
    from django.db import connections

    connections.close_all()
    logs = ROOT / "var" / "bench-fairness"
    logs.mkdir(parents=True, exist_ok=True)
    port = fl.free_port()
    base = f"http://127.0.0.1:{port}"
    queues = f"{settings.INGEST_HIGH_QUEUE},{settings.INGEST_QUEUE},{settings.BATCH_QUEUE}"
    procs = [fl.start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application",
                       "--bind", f"127.0.0.1:{port}", "--workers", "2", "--threads", "4",
                       "--timeout", "120"], env, logs / "gunicorn.log")]
    for n in range(2):
        procs.append(fl.start(
            [sys.executable, "-m", "celery", "-A", "trustrank", "worker", "--pool", "solo",
             "-Q", queues, "-l", "info", "-n", f"fair{n}-{os.getpid()}@%h", "--without-gossip",
             "--without-mingle", *(["-B", "-s", str(logs / "beat-schedule")] if n == 0 else [])],
            env, logs / f"worker{n}.log"))
    pods, nodes = small_trace(args.trace_pods, args.trace_nodes)
    b_http = requests.Session()
    b_http.headers["X-Api-Key"] = keys["b"]
    a_http = requests.Session()
    a_http.headers["X-Api-Key"] = keys["a"]
    b_urls: list[str] = []
    b_refused = [0]
    b_posted = threading.Event()

    def team_b() -> None:
        for i in range(max(args.replays, args.exports)):
            if i < args.replays:
                refused, body = post_until_accepted(
                    b_http, f"{base}/api/v1/replay-runs",
                    data={"mode": "inflation", "seeds": "3",
                          "strategies": ["best_fit", "fgd"]},
                    files={"pods": ("pods.csv", pods), "nodes": ("nodes.csv", nodes)},
                )
                b_refused[0] += refused
                b_urls.append(base + body["status_url"])
            if i < args.exports:
                response = b_http.get(f"{base}/api/v1/exports?format=csv&state=all", timeout=60)
                while response.status_code == 429:
                    b_refused[0] += 1
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                    response = b_http.get(f"{base}/api/v1/exports?format=csv&state=all",
                                          timeout=60)
                if response.status_code != 202:
                    raise SystemExit(f"export: {response.status_code} {response.text[:300]}")
                b_urls.append(base + response.json()["status_url"])
        b_posted.set()

    a_seconds: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one_sbom(n: int) -> None:
        try:
            timed_sbom(n)
        except BaseException as exc:  # a failed upload must fail the bench, not vanish
            errors.append(f"SBOM {n}: {exc}")

    def timed_sbom(n: int) -> None:
        started = time.perf_counter()
        response = a_http.post(
            f"{base}/api/v1/sboms?projectName=app-{n}&projectVersion=1.0.{n}&autoCreate=true",
            data=sbom(n, args.components), headers={"Content-Type": "application/json"},
            timeout=60,
        )
        if response.status_code != 202:
            raise SystemExit(f"SBOM {n}: {response.status_code} {response.text[:300]}")
        job = wait_done(a_http, base + response.json()["status_url"], poll=0.05, timeout=300)
        if job["status"] != "done":
            raise SystemExit(f"SBOM {n} failed: {job.get('error')}")
        with lock:
            a_seconds.append(time.perf_counter() - started)

    try:
        fl.wait_http(base + "/login/", procs[0])
        b_thread = threading.Thread(target=team_b, daemon=True)
        b_started = time.perf_counter()
        b_thread.start()
        time.sleep(3)  # B's burst is queued and its first batch jobs run
        uploads = []
        for n in range(args.sboms):
            thread = threading.Thread(target=one_sbom, args=(n,), daemon=True)
            thread.start()
            uploads.append(thread)
            time.sleep(0.5)
        for thread in uploads:
            thread.join(300)
        a_done = time.perf_counter() - b_started
        b_thread.join(1800)
        for url in list(b_urls):
            wait_done(b_http, url, poll=0.5, timeout=1800)
        b_seconds = time.perf_counter() - b_started
    finally:
        for proc in procs:
            fl.stop(proc)
        import redis

        client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
        prefix = env["TRUSTRANK_QUEUE_PREFIX"]
        stale = [*client.scan_iter(f"{prefix}*"), *client.scan_iter(f"_kombu.binding*.{prefix}*")]
        if stale:
            client.delete(*stale)
    if len(a_seconds) != args.sboms:
        raise SystemExit(f"only {len(a_seconds)} of {args.sboms} SBOMs finished: {errors[:3]}")
    a_seconds.sort()
    print(f"team A: {len(a_seconds)} SBOMs; seconds from upload to done: "
          + ", ".join(f"{s:.2f}" for s in a_seconds))
    print(f"team B: {len(b_urls)} batch jobs done in {b_seconds:.0f} s, "
          f"{b_refused[0]} posts answered 429 first; A was done {a_done:.0f} s into B's burst")
    print(json.dumps({
        "a_p95_seconds": round(fl.percentile(a_seconds, 0.95), 2),
        "a_max_seconds": round(a_seconds[-1], 2),
        "a_median_seconds": round(fl.percentile(a_seconds, 0.5), 2),
        "b_replays": args.replays,
        "b_exports": args.exports,
        "b_seconds": round(b_seconds, 1),
        "b_refused_429": b_refused[0],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
