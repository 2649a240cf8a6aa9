"""Scale-out: the same mixed load done by 1, 2 and 4 worker hosts on one PostgreSQL and one
broker.

Each worker host is a copy of the working tree (the files git tracks or would track) with a
virtualenv of its own (`python -m venv` + `pip install -e .`) and a TRUSTRANK_VAR_DIR of its
own, as separate machines would have; the copies are kept between runs under
$TMPDIR/trustrank-scaleout (sources refreshed when the tree changes, the virtualenv rebuilt
when pyproject.toml does). They share only the database, the broker (Redis, or RabbitMQ with
--broker amqp://guest:guest@127.0.0.1:5672//) and the export storage (TRUSTRANK_EXPORT_DIR).

Each round: a fresh database cloned from a seeded template; one gunicorn (this tree) takes
the whole load through the HTTP API while no worker runs (SBOMs, OTLP traces, OTLP metrics,
ranking runs, large CSV exports, scheduling replays of an uploaded pod/node trace: every
request a job row); then N workers start (solo pool: one process a host), each on a queue
nothing is sent to, and once all of them answer a ping they take the job queues together
(Celery's remote control), so that no host's boot falls in the measured time. The round's
throughput is its jobs over the time from the first claim to the last finish, read from the
job rows. Lost and duplicated are read from the
database: submitted jobs not done, job rows beyond those submitted, SBOMs stored twice,
teams ranked more often than asked, exports audited twice, replays without a result.
The counts take turns for `--repeats` rounds each (3), and each count's throughput is the
median of its rounds; each round also reports the cores the machine kept busy meanwhile
(one worker and PostgreSQL take turns on about one core, which bounds what a second adds)
and the CPU a job took in the worker processes and in the rest of the machine.

The default load (384 jobs: 120 SBOMs, 120 trace and 120 metrics requests, 8 ranking runs,
8 exports, 8 replays) keeps a round of two or four workers busy for about 20 s. A third
of it made rounds of 6-8 s, whose edges (the batch jobs, the longest, are taken last, after
the ingest queues) moved a round's figure by a fifth: four workers measured below two in
one run and above in the next.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/scaleout.py

Last line: {"speedup_2": …, "speedup_4": …, "jobs_per_second": {…}, "cores_busy": {…},
            "lost": 0, "duplicated": 0, "load_average": …}
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.findings_list as fl  # noqa: E402
from bench._scaleout_check import (  # noqa: E402
    ROUND_DB,
    _admin_url,
    _cpu_jiffies,
    all_done,
    process_cpu_jiffies,
    queues_drop,
    round_check,
)
from bench._scaleout_hosts import HOSTS_DIR, hosts_prepare  # noqa: E402

TEMPLATE_DB = "trustrank_bench_scaleout_tmpl"


# --- database and load ----------------------------------------------------------------------


def base_env(broker: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    env.update({
        "CELERY_BROKER_URL": broker,
        "DJANGO_SETTINGS_MODULE": "trustrank.settings",
        "TRUSTRANK_TESTING": "1",
        "TRUSTRANK_CACHE": "locmem",
        "TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT": "100000",
        "TRUSTRANK_JOBS_QUEUED_MAX_EXPORT": "1000",
        # Exports are batch work: let every host take one at a time.
        "TRUSTRANK_JOBS_BATCH_SLOTS": "4",
        "TRUSTRANK_JOBS_BATCH_SLOTS_PER_TEAM": "4",
        "TRUSTRANK_EXPORT_STREAM_MAX_ROWS": "100",
        # The re-ranks loads ask for wait past the round: the ranking runs measured are the
        # ones asked for through the API.
        "TRUSTRANK_RANKING_DEBOUNCE_SECONDS": "3600",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("TRUSTRANK_VAR_DIR", None)
    return env


def template_prepare(env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Migrate and seed the template database once per run; returns the keys and counts."""
    import psycopg

    with psycopg.connect(_admin_url(env), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{ROUND_DB}" WITH (FORCE)')
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    seed_env = {**env, "TRUSTRANK_DB_NAME": TEMPLATE_DB,
                "TRUSTRANK_VAR_DIR": str(HOSTS_DIR / "seed")}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=seed_env,
                   check=True)
    script = (
        "import json, sys, django\n"
        "sys.path.insert(0, '.')\n"
        "django.setup()\n"
        "from bench.scaleout import seed\n"
        f"print(json.dumps(seed(ranking_teams={args.ranking_runs}, "
        f"findings={args.ranking_findings}, load_teams={args.teams})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=seed_env, check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def seed(*, ranking_teams: int, findings: int, load_teams: int) -> dict[str, Any]:
    """Teams that send SBOMs, traces and metrics (one key each), and teams with findings to
    rank and export (a triage key each)."""
    from bench.rerank import build
    from trustrank.accounts.models import Team
    from trustrank.accounts.services import api_key_issue

    load = []
    for n in range(load_teams):
        team = Team.objects.create(name=f"load-{n}")
        load.append(api_key_issue(
            team=team, name="ci",
            scopes=["sbom:write", "traces:write", "metrics:write", "read"]).secret)
    ranked = []
    for n in range(ranking_teams):
        team = Team.objects.get(pk=build(findings=findings, services=40, edges=80, versions=10,
                                         seed=n))
        team.name = f"ranked-{n}"
        team.save(update_fields=["name"])
        # Replays need the admin scope; a bench key, on a throwaway database.
        ranked.append(api_key_issue(team=team, name="triage",
                                    scopes=["triage", "read", "admin"]).secret)
    return {"load_keys": load, "ranked_keys": ranked, "findings": findings}


def payloads(args: argparse.Namespace) -> dict[str, list[bytes]]:
    from bench._otlp_spans import build_request_bytes
    from bench.sbom_generate import make_bom
    from tests.cluster.otlp_build import dcgm_request

    now_ns = time.time_ns()
    pods, nodes = replay_trace(args.replay_pods, args.replay_nodes)
    return {
        "replay": [pods, nodes],
        "sbom": [make_bom(args.components, seed=n) for n in range(args.sboms)],
        "traces": [build_request_bytes(args.spans, seed=n + 1, now_ns=now_ns - n * 1_000_000)
                   for n in range(args.traces)],
        "metrics": [dcgm_request(nodes=args.nodes, gpus=8, series=20,
                                 time_ns=now_ns - (args.metrics - n) * 60_000_000_000,
                                 cluster=f"c{n % 4}").SerializeToString()
                    for n in range(args.metrics)],
    }


def replay_trace(pods: int, nodes: int) -> tuple[bytes, bytes]:
    """The first `pods` pods of the bundled openb trace and every 8th of its nodes, as the
    two CSV files a replay upload takes (`tests/replay/helpers.csv_subset`)."""
    import tempfile

    from tests.replay.helpers import csv_subset

    with tempfile.TemporaryDirectory() as tmp:
        pods_path, nodes_path = csv_subset(pods=pods, nodes=nodes, tmp=Path(tmp))
        return pods_path.read_bytes(), nodes_path.read_bytes()


def push(base: str, seeded: dict[str, Any], data: dict[str, list[bytes]],
         args: argparse.Namespace) -> dict[str, Any]:
    """Every request of the load through the HTTP API; returns what was submitted."""
    import requests

    keys, ranked = seeded["load_keys"], seeded["ranked_keys"]
    lock = threading.Lock()
    sent: dict[str, Any] = {"sbom": [], "traces": 0, "metrics": 0, "ranking": [], "export": [],
                            "replay": []}

    def post(url: str, key: str, body: bytes, content_type: str) -> requests.Response:
        while True:
            response = requests.post(url, data=body, timeout=120, headers={
                "X-Api-Key": key, "Content-Type": content_type})
            if response.status_code != 429:
                return response
            time.sleep(float(response.headers.get("Retry-After", "1")))

    def one(task: tuple[str, int]) -> None:
        kind, n = task
        key = keys[n % len(keys)]
        if kind == "sbom":
            r = post(f"{base}/api/v1/sboms?projectName=app-{n}&projectVersion=1&autoCreate=true",
                     key, data["sbom"][n], "application/json")
            assert r.status_code == 202, r.text[:300]
            with lock:
                sent["sbom"].append(r.json()["id"])
        elif kind in ("traces", "metrics"):
            r = post(f"{base}/v1/{kind}", key, data[kind][n], "application/x-protobuf")
            assert r.status_code == 200, r.text[:300]
            with lock:
                sent[kind] += 1
        elif kind == "ranking":
            r = requests.post(f"{base}/api/v1/ranking-runs", json={}, timeout=120,
                              headers={"X-Api-Key": ranked[n]})
            assert r.status_code == 202, r.text[:300]
            with lock:
                sent["ranking"].append(r.json()["id"])
        elif kind == "replay":
            pods, nodes = data["replay"]
            r = requests.post(f"{base}/api/v1/replay-runs", timeout=120,
                              headers={"X-Api-Key": ranked[n % len(ranked)]},
                              data={"mode": "timeline", "placement": "best_fit", "compress": "500",
                                    "policies": "static_weight_rr"},
                              files={"pods": ("pods.csv", pods), "nodes": ("nodes.csv", nodes)})
            assert r.status_code == 202, r.text[:300]
            with lock:
                sent["replay"].append(r.json()["id"])
        else:
            r = requests.get(f"{base}/api/v1/exports?format=csv", timeout=120,
                             headers={"X-Api-Key": ranked[n % len(ranked)]})
            assert r.status_code == 202, r.text[:300]
            with lock:
                sent["export"].append(r.json()["id"])

    tasks = [("sbom", n) for n in range(args.sboms)] + [
        ("traces", n) for n in range(args.traces)] + [
        ("metrics", n) for n in range(args.metrics)] + [
        ("ranking", n) for n in range(len(ranked))] + [
        ("export", n) for n in range(args.exports)] + [
        ("replay", n) for n in range(args.replays)]
    tasks.sort(key=lambda t: (t[1], t[0]))  # interleaved kinds, as real clients send them
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, tasks))
    return sent


def run_round(workers: int, hosts: list[tuple[Path, Path]], env: dict[str, str],
              seeded: dict[str, Any], data: dict[str, list[bytes]],
              args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(_admin_url(env), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{ROUND_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{ROUND_DB}" TEMPLATE "{TEMPLATE_DB}"')
    env = {**env, "TRUSTRANK_DB_NAME": ROUND_DB,
           "TRUSTRANK_QUEUE_PREFIX": f"bench-scale-{os.getpid()}-{workers}-"}
    logs = HOSTS_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    shared_exports = HOSTS_DIR / "shared-exports"
    shutil.rmtree(shared_exports, ignore_errors=True)
    port = fl.free_port()
    base = f"http://127.0.0.1:{port}"
    web_env = {**env, "TRUSTRANK_VAR_DIR": str(HOSTS_DIR / "web"),
               "TRUSTRANK_EXPORT_DIR": str(shared_exports)}
    web = fl.start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application", "--bind",
                    f"127.0.0.1:{port}", "--workers", "2", "--threads", "4", "--timeout", "120"],
                   web_env, logs / f"gunicorn-{workers}.log")
    procs = [web]
    try:
        fl.wait_http(base + "/login/", web)
        sent: dict[str, Any] = {"pushed_at": datetime.now(UTC)}
        pushed = time.perf_counter()
        sent.update(push(base, seeded, data, args))
        print(f"  {workers} workers: load pushed in {time.perf_counter() - pushed:.1f} s",
              flush=True)
        prefix = env["TRUSTRANK_QUEUE_PREFIX"]
        names = []
        for n in range(workers):
            python, src = hosts[n]
            host_env = {**env, "TRUSTRANK_VAR_DIR": str(HOSTS_DIR / f"host{n}" / "var"),
                        "TRUSTRANK_EXPORT_DIR": str(shared_exports),
                        "PATH": f"{python.parent}:{env.get('PATH', '')}"}
            host_env.pop("PYTHONPATH", None)
            names.append(f"scale{n}-{os.getpid()}@{socket.gethostname()}")
            # On a queue nothing is sent to until every worker is up (`workers_up`).
            procs.append(subprocess.Popen(
                [str(python), "-m", "celery", "-A", "trustrank", "worker", "--pool", "solo",
                 "-Q", f"{prefix}hold", "-l", "warning", "-n", names[-1],
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=src, env=host_env, stdout=(logs / f"worker{workers}-{n}.log").open("wb"),
                stderr=subprocess.STDOUT, start_new_session=True))
        control = workers_up(env["CELERY_BROKER_URL"], names, procs[1:])
        booted = [proc.pid for proc in procs[1:]]
        cpu_start = _cpu_jiffies()
        workers_cpu_start = sum(map(process_cpu_jiffies, booted))
        workers_take(control, names,
                     [f"{prefix}{q}" for q in ("ingest_high", "ingest", "batch")])
        deadline = time.monotonic() + args.timeout
        while not all_done(env, sent):
            if time.monotonic() > deadline:
                raise SystemExit(f"{workers} workers: not done within {args.timeout} s")
            for proc in procs[1:]:
                if proc.poll() is not None:
                    raise SystemExit(f"a worker exited with {proc.returncode}: see {logs}")
            time.sleep(0.5)
        load = os.getloadavg()[0]
        cpu_end = _cpu_jiffies()
        workers_cpu = sum(map(process_cpu_jiffies, booted)) - workers_cpu_start
    finally:
        for proc in procs:
            fl.stop(proc)
        queues_drop(env)
    result = round_check(env, sent, seeded)
    # The cores busy from the moment the workers took the queues to the last check (the
    # window and up to half a second after it): what one worker leaves of the machine bounds
    # what more can add. And whose: the worker processes' own CPU, and the rest of the
    # machine's (PostgreSQL, the broker, the idle web), each per job.
    spent, idle = cpu_end[0] - cpu_start[0], cpu_end[1] - cpu_start[1]
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    busy = (spent - idle) * tick_ms  # /proc/stat sums every core
    result.update(workers=workers, load_average=round(load, 2),
                  jobs_per_second=result["jobs"] / result["seconds"],
                  cores_busy=round((1 - idle / max(1, spent)) * (os.cpu_count() or 1), 2),
                  workers_cpu_ms_per_job=round(workers_cpu * tick_ms / result["jobs"], 1),
                  other_cpu_ms_per_job=round(
                      (busy - workers_cpu * tick_ms) / result["jobs"], 1))
    return result


def workers_up(broker: str, names: list[str], procs: list[subprocess.Popen[bytes]]) -> Any:
    """Celery's remote control, once every worker `names` answers a ping (booted: Django,
    the apps, the broker). Booting is a host's one-time cost: workers started on the job
    queues began the clock with the first one up while the others still booted on the same
    cores (two to four seconds of CPU each), which cost four workers more than two."""
    from celery import Celery

    control = Celery(broker=broker).control
    deadline = time.monotonic() + 180
    while len(control.ping(destination=names, timeout=1.0)) < len(names):
        for proc in procs:
            if proc.poll() is not None:
                raise SystemExit(f"a worker exited with {proc.returncode} before it was up")
        if time.monotonic() > deadline:
            raise SystemExit("the workers did not answer within 180 s")
    return control


def workers_take(control: Any, names: list[str], queues: list[str]) -> None:
    """Every worker `names` consumes `queues` too, in their order (the first drained first)."""
    for queue in queues:
        replies = control.add_consumer(queue, destination=names, reply=True, timeout=5.0)
        if len(replies) < len(names):
            raise SystemExit(f"not every worker took {queue}: {replies}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--broker", default=os.environ.get("CELERY_BROKER_URL",
                                                          "redis://127.0.0.1:6379/0"))
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--sboms", type=int, default=120)
    parser.add_argument("--components", type=int, default=400)
    parser.add_argument("--traces", type=int, default=120)
    parser.add_argument("--spans", type=int, default=3000)
    parser.add_argument("--metrics", type=int, default=120)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--ranking-runs", type=int, default=8)
    parser.add_argument("--ranking-findings", type=int, default=2000)
    parser.add_argument("--exports", type=int, default=8)
    parser.add_argument("--replays", type=int, default=8)
    parser.add_argument("--replay-pods", type=int, default=1500)
    parser.add_argument("--replay-nodes", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--repeats", type=int, default=3,
        help="rounds per worker count, in turns (1, 2, 4, 1, 2, 4, ...); each count's "
             "throughput is the median of its rounds (one round's figure moves by a fifth "
             "with what else the machine does)")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    hosts = hosts_prepare(max(counts))
    env = base_env(args.broker)
    seeded = template_prepare(env, args)
    os.environ.update({**env, "TRUSTRANK_DB_NAME": TEMPLATE_DB})
    data = payloads(args)
    rounds: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
    for repeat in range(max(1, args.repeats)):
        for workers in counts:
            result = run_round(workers, hosts, env, seeded, data, args)
            rounds[workers].append(result)
            print(f"{workers} worker host(s), round {repeat + 1}: {result['jobs']} jobs in "
                  f"{result['seconds']:.1f} s = {result['jobs_per_second']:.2f} jobs/s (lost "
                  f"{result['lost']}, duplicated {result['duplicated']}, retried "
                  f"{result['retried']}; {result['cores_busy']} cores busy, CPU a job: workers "
                  f"{result['workers_cpu_ms_per_job']} ms, the rest "
                  f"{result['other_cpu_ms_per_job']} ms; load average "
                  f"{result['load_average']})", flush=True)
    median = {w: statistics.median(r["jobs_per_second"] for r in rs) for w, rs in rounds.items()}
    one = median[counts[0]]
    summary: dict[str, Any] = {
        f"speedup_{w}": round(m / one, 2) for w, m in median.items() if w != counts[0]
    }
    summary.update(
        jobs_per_second={str(w): round(m, 2) for w, m in median.items()},
        cores_busy={str(w): statistics.median(r["cores_busy"] for r in rs)
                    for w, rs in rounds.items()},
        rounds=max(1, args.repeats),
        lost=sum(r["lost"] for rs in rounds.values() for r in rs),
        duplicated=sum(r["duplicated"] for rs in rounds.values() for r in rs),
        load_average=round(os.getloadavg()[0], 2),
        cores=os.cpu_count(),
        broker=args.broker.split("://")[0],
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
