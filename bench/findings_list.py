"""The findings list under a security team's load, and the auditor's full CSV export.

1,000,000 findings of one team in PostgreSQL (the ranking bench's generator, then a ranking
run so `ordering=rank` and the decision filter have ranks). 20 concurrent clients page and
filter `GET /api/v1/findings` and the `/findings/` page against gunicorn: default pages,
deep pages, severity / KEV / state / decision filters, substring search on ids, package
names and purls, contextual order. Each client is an analyst (or a script of one): it reads
an answer before asking again, `--think` seconds on average (uniform over 0.5–1.5 times it;
default 1 s; `--think 0` is a closed loop, which on 2 cores measures queueing, not a page). Then one CSV export of all 1,000,000 findings through
`GET /api/v1/exports?format=csv`, run by a real Celery worker; its time (request to file
ready) and the worker's peak RSS.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/findings_list.py \
        [--findings 1000000] [--clients 20] [--seconds 60] [--reuse]

`--reuse` keeps the bench database of an earlier run (it is built once: ~3 min).
Last line: {"p95_ms": …, "export_seconds": …, "export_peak_mb": …}

The server runs as deployed (docker/Dockerfile, dev.py): gunicorn's threaded workers,
`--web-workers` processes of `--web-threads` threads (4 and 4). Each client keeps its
connection alive between requests, as a browser does; `connections_per_request` says how
often one was opened. Until 2026-12-05 the bench ran sync workers (`--web-threads 1`), which
close every connection: each request paid a connection, and a short request queued behind
long ones in the four processes (p95 458 → 113 ms at 1M, back to back, load 3.3–4.2).

The clients share the machine with the server, so what they cost counts against it:
`client_cpu_ms_per_request` is this process's CPU per request. Until 2026-12 the clients
used `requests`, ~4 ms of CPU a request (~0.4 of the two cores at 100 requests/s); they now
send the same requests (same headers, cookie and key) with the standard library's
http.client. `--client requests` measures as before, to compare figures across that change.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ranked_db import BENCH_TEAM, ranked_database_prepare  # noqa: E402

BENCH_DB = "trustrank_bench_findings"

# (label, path): what analysts and their scripts ask for.
SCENARIOS: list[tuple[str, str]] = [
    ("api default", "/api/v1/findings"),
    ("api deep page", "/api/v1/findings?page={page}"),
    ("api by rank", "/api/v1/findings?ordering=rank"),
    ("api critical", "/api/v1/findings?severity=critical"),
    ("api kev", "/api/v1/findings?kev=true"),
    ("api decision", "/api/v1/findings?decision=immediate&ordering=rank"),
    ("api search id", "/api/v1/findings?q=CVE-2024-0{n2}"),
    ("api search pkg", "/api/v1/findings?q=pkg{n3}"),
    ("api search purl", "/api/v1/findings?q=pkg:maven/org.bench/pkg{n2}"),
    ("api high, rank", "/api/v1/findings?severity=high&state=in_triage&ordering=rank"),
    ("page default", "/findings/"),
    # The page's "Next" link: a position in the contextual order (`page` is the API's).
    ("page deep", "/findings/?after=@{offset}"),
    ("page search", "/findings/?q=CVE-2024-00{n1}"),
    ("page critical kev", "/findings/?severity=critical&kev=true"),
    ("page by rank", "/findings/?ordering=rank&severity=medium"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bench_env(db_name: str = BENCH_DB) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "trustrank.settings",
            "TRUSTRANK_DB_NAME": db_name,
            "TRUSTRANK_QUEUE_PREFIX": f"bench-findings-{os.getpid()}",
            "TRUSTRANK_TESTING": "1",
            # As deployed: web workers share the totals they count (TESTING would keep them
            # per process).
            "TRUSTRANK_CACHE": "file",
            # Kept list pages are off by default (docs/triage.md); this bench measures them on.
            "TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS": "60",
            "TRUSTRANK_VAR_DIR": str(ROOT / "var" / "bench-findings"),
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def database_prepare(env: dict[str, str], *, findings: int, reuse: bool) -> None:
    ranked_database_prepare(
        env, name=env["TRUSTRANK_DB_NAME"], findings=findings, reuse=reuse,
        services=10_000, edges=50_000, versions=2_000,
    )


def credentials() -> tuple[str, str]:
    """An API key with `read` and a signed-in session of a team member, for the two clients."""
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore

    from trustrank.accounts.models import Membership, Role, Team
    from trustrank.accounts.services import api_key_issue

    team = Team.objects.get(name=BENCH_TEAM)
    user, _ = get_user_model().objects.get_or_create(username="bench-analyst")
    user.set_password(os.urandom(12).hex())
    user.save()
    Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.TRIAGER})
    key = api_key_issue(team=team, name="bench", scopes=["read"]).secret
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return key, session.session_key or ""


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_http(url: str, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    import requests

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            requests.get(url, timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {seconds} s")


class PlainClient:
    """GETs with the standard library's client (`requests` spent ~4 ms of CPU on each, in
    the 100 client threads that share the server's two cores), on one connection kept
    alive between requests as a browser keeps it, opened again when the server closed it
    (gunicorn's sync workers close every connection; its threaded workers keep them)."""

    def __init__(self, base: str) -> None:
        host, _, port = base.removeprefix("http://").partition(":")
        self._address = (host, int(port))
        self._conn: http.client.HTTPConnection | None = None
        self.connections = 0

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        for attempt in (1, 2):
            fresh = self._conn is None
            if fresh:
                self._conn = http.client.HTTPConnection(*self._address, timeout=60)
                self.connections += 1
            conn = self._conn
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if fresh or attempt == 2:  # not a kept connection the server let go
                    raise
                continue
            if response.will_close:
                self.close()
            return response.status, body
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def load(
    base: str, *, key: str, session_id: str, clients: int, seconds: float, think: float,
    client_kind: str = "plain",
) -> dict[str, Any]:
    """Concurrent clients; latencies of the measured window, by scenario."""
    import requests

    stop_at = time.monotonic() + seconds
    results: list[tuple[str, float, int]] = []
    connections: list[int] = []
    lock = threading.Lock()
    # What either client sends besides: the same headers as requests' defaults.
    common = {"User-Agent": "bench", "Accept-Encoding": "gzip, deflate", "Accept": "*/*"}
    api_headers = {**common, "X-Api-Key": key}
    page_headers = {**common, "Cookie": f"sessionid={session_id}"}

    def client(number: int) -> None:
        rnd = random.Random(number)
        http = requests.Session()
        http.headers["X-Api-Key"] = key
        pages = requests.Session()
        pages.cookies.set("sessionid", session_id, domain="127.0.0.1")
        plain = PlainClient(base)
        mine: list[tuple[str, float, int]] = []
        while time.monotonic() < stop_at:
            label, template = rnd.choice(SCENARIOS)
            page = rnd.randint(2, 100)
            path = template.format(
                page=page, offset=(page - 1) * 50, n1=rnd.randint(0, 9), n2=rnd.randint(10, 49),
                n3=rnd.randint(0, 499),
            )
            is_page = label.startswith("page")
            started = time.perf_counter()
            if client_kind == "requests":
                response = (pages if is_page else http).get(
                    base + path, timeout=60, allow_redirects=False
                )
                status, body = response.status_code, response.content
            else:
                status, body = plain.get(path, page_headers if is_page else api_headers)
            took = (time.perf_counter() - started) * 1000
            if status != 200:
                raise SystemExit(f"{path}: {status} {body[:300]!r}")
            mine.append((label, took, len(body)))
            if think:
                time.sleep(rnd.uniform(0.5 * think, 1.5 * think))
        plain.close()
        with lock:
            results.extend(mine)
            connections.append(plain.connections)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_label: dict[str, list[float]] = {}
    for label, took, _ in results:
        by_label.setdefault(label, []).append(took)
    for label, values in sorted(by_label.items()):
        print(f"  {label:18s} n={len(values):5d} p50 {percentile(values, 0.5):7.1f} ms  "
              f"p95 {percentile(values, 0.95):7.1f} ms")
    latencies = [took for _, took, _ in results]
    return {
        "requests": len(latencies),
        "p50_ms": round(percentile(latencies, 0.5), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "p99_ms": round(percentile(latencies, 0.99), 1),
        "per_s": round(len(latencies) / seconds, 1),
        # 1.0: every request opened a connection; near 0: connections were kept alive.
        "connections_per_request": round(sum(connections) / max(1, len(latencies)), 3),
    }


def tree_cpu_seconds(pid: int) -> float:
    """User and system CPU of a process and its children (gunicorn's workers), in seconds:
    what the requests cost the server, whatever else the machine runs meanwhile."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class DatabaseCpu:
    """CPU of the PostgreSQL backends serving one database while it runs, in seconds: the
    other half of what a request costs. Backends come and go (web workers reconnect after
    DB_CONN_MAX_AGE), so they are sampled every half second; a backend first seen during the
    window counts from zero."""

    def __init__(self, db_name: str) -> None:
        self._db = db_name
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = False

    def _sample(self) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> "
                        "pg_backend_pid()", [self._db])
            pids = [int(row[0]) for row in cur.fetchall()]
        for pid in pids:
            cpu = tree_cpu_seconds(pid)
            if pid not in self._first:
                self._first[pid] = cpu if not self._started else 0.0
            self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._started = True
        self._thread.start()

    def seconds(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum(self._last[p] - self._first[p] for p in self._last)


class Writer:
    """A finding of the bench team touched every `every` seconds (an analyst's triage, an
    ingest), in its own thread and connection, until stopped; how many writes it made."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._stop = threading.Event()
        self._writes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        if every > 0:
            self._thread.start()

    def _run(self) -> None:
        from django.db import connection

        while not self._stop.wait(self._every):
            with connection.cursor() as cur:
                cur.execute(
                    "UPDATE findings_finding SET updated_at = now() WHERE id = "
                    "(SELECT min(id) FROM findings_finding)"
                )
            self._writes += 1
        connection.close()

    def stop(self) -> int:
        self._stop.set()
        if self._every > 0:
            self._thread.join()
        return self._writes


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def export_all(base: str, *, key: str, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """CSV of every finding through the API, as an auditor's script would fetch it."""
    import requests

    http = requests.Session()
    http.headers["X-Api-Key"] = key
    started = time.perf_counter()
    response = http.get(base + "/api/v1/exports?format=csv&state=all", timeout=600, stream=True)
    if response.status_code == 202:
        status_url = response.json()["status_url"]
        while True:
            job = http.get(base + status_url if status_url.startswith("/") else status_url,
                           timeout=30).json()
            if job["status"] in ("done", "failed"):
                break
            time.sleep(0.5)
        if job["status"] != "done":
            raise SystemExit(f"export failed: {job}")
        ready = time.perf_counter() - started
        download = job["download_url"]
        response = http.get(base + download if download.startswith("/") else download,
                            timeout=600, stream=True)
    elif response.status_code != 200:
        raise SystemExit(f"export: {response.status_code} {response.text[:300]}")
    else:
        ready = None
    lines = 0
    size = 0
    for chunk in response.iter_content(chunk_size=1 << 20):
        lines += chunk.count(b"\n")
        size += len(chunk)
    total = time.perf_counter() - started
    return {
        "export_seconds": round(total, 1),
        "export_ready_seconds": None if ready is None else round(ready, 1),
        "export_rows": lines - 1,
        "export_mb": round(size / 1e6, 1),
        "export_peak_mb": round(vm_hwm_mb(worker.pid), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--think", type=float, default=1.0)
    parser.add_argument("--web-workers", type=int, default=4)
    # Threads per web worker: 4 as deployed (docker/Dockerfile, dev.py: gunicorn's gthread
    # workers, which keep connections alive); 1 is a sync worker, which closes each one (the
    # figures before 2026-12-05).
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--skip-export", action="store_true")
    # A finding written every this many seconds while the clients read (0: none): each write
    # moves the generation, so every kept total, order head and page is computed again.
    parser.add_argument("--write-every", type=float, default=0.0)
    # Helpers sharing one PostgreSQL each bench their own database.
    parser.add_argument("--db-name", default=BENCH_DB)
    # The load generator's HTTP client: "plain" (http.client, the default) or "requests"
    # (the figures before 2026-12: ~4 ms of client CPU a request, on the same two cores).
    parser.add_argument("--client", choices=["plain", "requests"], default="plain")
    args = parser.parse_args()

    env = bench_env(args.db_name)
    database_prepare(env, findings=args.findings, reuse=args.reuse)
    key, session_id = credentials()
    from django.db import connections

    connections.close_all()

    logs = ROOT / "var" / "bench-findings"
    logs.mkdir(parents=True, exist_ok=True)
    # Every run starts with nothing kept: the clients ask the same sequence each run (seeded
    # by number), and a search's sorted matches are kept an hour per findings generation, so
    # a `--reuse` run found an earlier run's searches sorted (10M: p95 816 then 65 ms).
    shutil.rmtree(logs / "cache", ignore_errors=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    web = start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application",
                 "--bind", f"127.0.0.1:{port}", "--workers", str(args.web_workers),
                 "--threads", str(args.web_threads), "--timeout", "300"], env, logs / "gunicorn.log")
    from django.conf import settings

    # --pool solo: the export runs in the worker's main process, whose VmHWM is its peak.
    worker = start([sys.executable, "-m", "celery", "-A", "trustrank", "worker", "--pool",
                    "solo", "-Q", f"{settings.INGEST_HIGH_QUEUE},{settings.INGEST_QUEUE},{settings.BATCH_QUEUE}", "-l",
                    "warning",
                    "-n", f"bench-findings-{os.getpid()}@%h", "--without-gossip",
                    "--without-mingle"], env, logs / "worker.log")
    try:
        wait_http(base + "/login/", web)
        warm = load(base, key=key, session_id=session_id, clients=args.clients, seconds=10,
                    think=args.think, client_kind=args.client)
        print(f"warm-up: {warm}")
        print(f"{args.clients} clients for {args.seconds:.0f} s:")
        cpu_before, load_before = tree_cpu_seconds(web.pid), os.getloadavg()
        client_before = time.process_time()
        database_cpu = DatabaseCpu(args.db_name)
        database_cpu.start()
        writer = Writer(args.write_every)
        figures = load(base, key=key, session_id=session_id, clients=args.clients,
                       seconds=args.seconds, think=args.think, client_kind=args.client)
        # This process: the clients' threads (and the database CPU sampler's).
        figures["client_cpu_ms_per_request"] = round(
            (time.process_time() - client_before) * 1000 / max(1, figures["requests"]), 1
        )
        figures["writes"] = writer.stop()
        figures["web_cpu_ms_per_request"] = round(
            (tree_cpu_seconds(web.pid) - cpu_before) * 1000 / max(1, figures["requests"]), 1
        )
        figures["db_cpu_ms_per_request"] = round(
            database_cpu.seconds() * 1000 / max(1, figures["requests"]), 1
        )
        figures["load_before"] = [round(x, 2) for x in load_before]
        figures["load_after"] = [round(x, 2) for x in os.getloadavg()]
        print(figures)
        exported: dict[str, Any] = {}
        if not args.skip_export:
            exported = export_all(base, key=key, worker=worker)
            print(exported)
    finally:
        stop(web)
        stop(worker)
    print(json.dumps({
        "p95_ms": figures["p95_ms"],
        "p50_ms": figures["p50_ms"],
        "requests_per_s": figures["per_s"],
        "clients": args.clients,
        "think_s": args.think,
        "web_workers": args.web_workers,
        "web_threads": args.web_threads,
        "web_cpu_ms_per_request": figures["web_cpu_ms_per_request"],
        "db_cpu_ms_per_request": figures["db_cpu_ms_per_request"],
        "client_cpu_ms_per_request": figures["client_cpu_ms_per_request"],
        "client": args.client,
        "connections_per_request": figures["connections_per_request"],
        "writes": figures["writes"],
        "load_before": figures["load_before"],
        "load_after": figures["load_after"],
        "findings": args.findings,
        **{k: exported.get(k) for k in ("export_seconds", "export_peak_mb", "export_rows")},
    }))


if __name__ == "__main__":
    main()
