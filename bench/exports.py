"""The auditor's full CSV export: `GET /api/v1/exports?format=csv` over 1,000,000 findings,
streamed straight back by gunicorn (threshold raised above the count) and as the
exports_run job on a real Celery worker (the default threshold). Time from request to last
byte, rows/s, and the peak RSS of the process that wrote the file.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/exports.py \
        [--findings 1000000] [--reuse]

Builds its own database (bench/findings_list.py's generator, then a ranking run). The lead's
bench/findings_list.py measures the job path the same way (`export_all`); `export_measure`
here is the helper to call for the streamed path.
Last line: {"stream_seconds": …, "stream_rows_per_s": …, "stream_peak_mb": …, "job_…": …}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.findings_list as fl  # noqa: E402

fl.BENCH_DB = "trustrank_bench_exports"


def children_hwm_mb(pid: int) -> float:
    """The largest VmHWM among gunicorn's workers (its children)."""
    best = 0.0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"\nPPid:\t{pid}\n" not in text:
            continue
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                best = max(best, int(line.split()[1]) / 1024)
    return best


def export_measure(base: str, *, key: str, query: str = "format=csv") -> dict[str, Any]:
    """GET /api/v1/exports?<query> and read it to the end (following a job if it is one)."""
    import requests

    http = requests.Session()
    http.headers["X-Api-Key"] = key
    started = time.perf_counter()
    response = http.get(f"{base}/api/v1/exports?{query}", timeout=900, stream=True)
    first_byte = None
    if response.status_code == 202:
        status_url = response.json()["status_url"]
        while True:
            job = http.get(base + status_url, timeout=30).json()
            if job["status"] in ("done", "failed"):
                break
            time.sleep(0.5)
        if job["status"] != "done":
            raise SystemExit(f"export failed: {job}")
        response = http.get(base + job["download_url"], timeout=900, stream=True)
    elif response.status_code != 200:
        raise SystemExit(f"export: {response.status_code} {response.text[:300]}")
    lines = size = 0
    for chunk in response.iter_content(chunk_size=1 << 20):
        if first_byte is None:
            first_byte = time.perf_counter() - started
        lines += chunk.count(b"\n")
        size += len(chunk)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 1),
        "first_byte_seconds": None if first_byte is None else round(first_byte, 1),
        "rows": lines - 1,
        "rows_per_s": round((lines - 1) / seconds),
        "mb": round(size / 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--skip-job", action="store_true")
    args = parser.parse_args()
    env = fl.bench_env()
    fl.database_prepare(env, findings=args.findings, reuse=args.reuse)
    key, _ = fl.credentials()
    from django.conf import settings
    from django.db import connections

    connections.close_all()
    logs = ROOT / "var" / "bench-exports"
    logs.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"findings": args.findings}

    port = fl.free_port()
    base = f"http://127.0.0.1:{port}"
    stream_env = {**env, "TRUSTRANK_EXPORT_STREAM_MAX_ROWS": str(args.findings * 2)}
    web = fl.start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application", "--bind",
                    f"127.0.0.1:{port}", "--workers", "1", "--timeout", "900"],
                   stream_env, logs / "gunicorn-stream.log")
    try:
        fl.wait_http(base + "/login/", web)
        streamed = export_measure(base, key=key, query="format=csv&state=all")
        streamed["peak_mb"] = round(children_hwm_mb(web.pid), 1)
        print("streamed:", streamed)
        out.update({f"stream_{k}": v for k, v in streamed.items()})
    finally:
        fl.stop(web)
    if not args.skip_job:
        port = fl.free_port()
        base = f"http://127.0.0.1:{port}"
        job_env = {**env, "TRUSTRANK_EXPORT_DIR": str(logs / "files")}
        web = fl.start([sys.executable, "-m", "gunicorn", "trustrank.wsgi:application",
                        "--bind", f"127.0.0.1:{port}", "--workers", "1", "--timeout", "900"],
                       job_env, logs / "gunicorn-job.log")
        worker = fl.start([sys.executable, "-m", "celery", "-A", "trustrank", "worker",
                           "--pool", "solo", "-Q",
                           f"{settings.INGEST_HIGH_QUEUE},{settings.INGEST_QUEUE},{settings.BATCH_QUEUE}",
                           "-l", "warning", "-n", f"bench-exports-{os.getpid()}@%h",
                           "--without-gossip", "--without-mingle"], job_env, logs / "worker.log")
        try:
            fl.wait_http(base + "/login/", web)
            job = export_measure(base, key=key, query="format=csv&state=all")
            job["peak_mb"] = round(fl.vm_hwm_mb(worker.pid), 1)
            print("job:", job)
            out.update({f"job_{k}": v for k, v in job.items()})
        finally:
            fl.stop(web)
            fl.stop(worker)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
