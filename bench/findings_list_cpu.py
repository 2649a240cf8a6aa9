"""CPU per findings-list request, kept and not kept, without the queueing of the full bench.

One gunicorn worker, the bench's own scenarios (bench/findings_list.py) asked one at a time
from a fixed draw, on the database that bench built: the worker's CPU per request (API and
page apart) and the PostgreSQL backends' per request. A first pass fills what is kept (totals,
order heads, and the pages unless `--cache 0`), then `--rounds` passes are measured. With
`--cache 0` no page is kept: every request renders its rows (what a cache miss costs); with
`--cache 60` (the full bench's setting) the repeated pages are served kept.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/findings_list_cpu.py \\
        --db-name trustrank_bench_findings [--cache 0|60] [--only api|page] [--n 200]

Each line: {"web_ms": …, "db_ms": …, "api_web_ms": …, "page_web_ms": …} per request.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.findings_list import (  # noqa: E402
    BENCH_DB,
    SCENARIOS,
    bench_env,
    credentials,
    free_port,
    start,
    stop,
    tree_cpu_seconds,
    wait_http,
)


def drawn(n: int, seed: int) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        label, template = rnd.choice(SCENARIOS)
        page = rnd.randint(2, 100)
        out.append((label, template.format(
            page=page, offset=(page - 1) * 50, n1=rnd.randint(0, 9), n2=rnd.randint(10, 49),
            n3=rnd.randint(0, 499),
        )))
    return out


def database_cpu(db_name: str) -> float:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> "
                    "pg_backend_pid()", [db_name])
        pids = [int(row[0]) for row in cur.fetchall()]
    connection.close()
    return sum(tree_cpu_seconds(pid) for pid in pids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db-name", default=BENCH_DB)
    parser.add_argument("--cache", default="60")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=["api", "page"], default=None)
    args = parser.parse_args()
    env = bench_env(args.db_name)
    env["TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS"] = args.cache
    os.environ.update(env)
    import django

    django.setup()
    import requests

    key, session_id = credentials()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = ROOT / "var" / "bench-findings"
    logs.mkdir(parents=True, exist_ok=True)
    web = start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application", "--bind",
                 f"127.0.0.1:{port}", "--workers", "1", "--timeout", "300"], env,
                logs / "gunicorn-cpu.log")
    try:
        wait_http(base + "/login/", web)
        time.sleep(1)
        worker = int(Path(f"/proc/{web.pid}/task/{web.pid}/children").read_text().split()[0])
        api = requests.Session()
        api.headers["X-Api-Key"] = key
        pages = requests.Session()
        pages.cookies.set("sessionid", session_id, domain="127.0.0.1")
        todo = [(label, path) for label, path in drawn(args.n, 1)
                if args.only is None or label.startswith(args.only)]

        def measure() -> dict[str, float]:
            spent: dict[str, list[float]] = {"api": [], "page": []}
            web_before, db_before = tree_cpu_seconds(worker), database_cpu(args.db_name)
            for label, path in todo:
                kind = "page" if label.startswith("page") else "api"
                before = tree_cpu_seconds(worker)
                response = (pages if kind == "page" else api).get(
                    base + path, timeout=60, allow_redirects=False
                )
                if response.status_code != 200:
                    raise SystemExit(f"{path}: {response.status_code}")
                spent[kind].append(tree_cpu_seconds(worker) - before)
            n = len(todo)
            return {
                "n": n,
                "web_ms": round((tree_cpu_seconds(worker) - web_before) * 1000 / n, 1),
                "db_ms": round((database_cpu(args.db_name) - db_before) * 1000 / n, 1),
                **{f"{kind}_web_ms": round(sum(v) * 1000 / len(v), 1)
                   for kind, v in spent.items() if v},
                "load": [round(x, 2) for x in os.getloadavg()],
            }

        print("first pass", json.dumps(measure()), flush=True)
        for number in range(args.rounds):
            print(f"round {number}", json.dumps(measure()), flush=True)
    finally:
        stop(web)


if __name__ == "__main__":
    main()
