"""The printable report an auditor takes away: the PDF of 10,000 ranked findings (every row
listed, with its explanation), made by the real export job handler (selection, rows,
ReportLab, file, audit event) in a fresh process, timed from the job's start to its file
written. peak_mb: the largest summed RSS of that process and any process it started,
sampled every 50 ms by this one (psutil) while it runs; also its own VmHWM, which the
sampling cannot miss.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/report.py \
        [--findings 10000] [--reuse]

Builds its own database (bench/rerank.py's generator, then a ranking run, so every row has
a rank, a decision, an explanation and a due date) and drops it at the end unless --keep.
Last line: {"seconds": …, "pages": …, "peak_mb": …}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ranked_db import BENCH_TEAM, admin_url, ranked_database_prepare  # noqa: E402

BENCH_DB = "trustrank_bench_report"


def bench_env(findings: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    var = ROOT / "var" / "bench-report"
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "trustrank.settings",
            "TRUSTRANK_DB_NAME": BENCH_DB,
            "TRUSTRANK_TESTING": "1",
            # The job runs in this process; its queue message goes nowhere.
            "CELERY_BROKER_URL": "memory://",
            "TRUSTRANK_VAR_DIR": str(var),
            "TRUSTRANK_EXPORT_DIR": str(var / "exports"),
            "TRUSTRANK_EXPORT_REPORT_MAX_ROWS": str(max(findings, 1)),
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def database_prepare(env: dict[str, str], *, findings: int, reuse: bool) -> None:
    versions = max(1, min(2_000, findings // 5))
    ranked_database_prepare(
        env, name=BENCH_DB, findings=findings, reuse=reuse,
        services=max(versions, 1_000), edges=5 * max(versions, 1_000), versions=versions,
    )


def database_drop(env: dict[str, str]) -> None:
    import psycopg

    with psycopg.connect(admin_url(env), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def render() -> dict[str, Any]:
    """In a process of its own: the export job of a PDF of every finding of the team."""
    import django

    django.setup()
    from django.conf import settings
    from pypdf import PdfReader

    from trustrank.accounts.models import Team
    from trustrank.accounts.principal import principal_for_command
    from trustrank.exports.services.params import ExportRequest
    from trustrank.exports.services.run import export_create, export_run_execute

    team = Team.objects.get(name=BENCH_TEAM)
    principal = principal_for_command(
        team_id=team.pk, command="bench-report", scopes=frozenset({"read", "export"})
    )
    export = export_create(
        principal=principal, req=ExportRequest(format="pdf", team_id=team.pk), streamed=False
    )
    started = time.perf_counter()
    cpu_before = _cpu()
    status = export_run_execute(export_id=export.pk)
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu_before
    export.refresh_from_db()
    if export.status != "done":
        raise SystemExit(f"export {status}: {export.error}")
    path = Path(settings.TRUSTRANK_EXPORT_DIR) / export.file_path
    reader = PdfReader(path)
    first = reader.pages[0].mediabox
    return {
        "seconds": round(seconds, 1),
        "pages": len(reader.pages),
        "vm_hwm_mb": round(vm_hwm_mb(), 1),
        # On a shared machine wall time mostly measures the neighbours: CPU seconds of this
        # process and its workers.
        "cpu_seconds": round(cpu, 1),
        "rows": export.rows,
        "size_mb": round(path.stat().st_size / 1e6, 1),
        "landscape": float(first.width) > float(first.height),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=10_000)
    parser.add_argument("--reuse", action="store_true", help="keep an earlier bench database")
    parser.add_argument("--keep", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--render", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    env = bench_env(args.findings)
    if args.render:
        os.environ.update(env)
        print(json.dumps(render()))
        return
    database_prepare(env, findings=args.findings, reuse=args.reuse)
    try:
        stdout, peak = _run_sampled(
            [sys.executable, __file__, "--render", "--findings", str(args.findings)], env
        )
    finally:
        if not args.keep:
            database_drop(env)
    result = json.loads(stdout.strip().splitlines()[-1])
    # The sampled peak, never below what the kernel recorded for the render process itself.
    result = {
        "seconds": result.pop("seconds"),
        "pages": result.pop("pages"),
        "peak_mb": round(max(peak, result["vm_hwm_mb"]), 1),
        "sampled_peak_mb": round(peak, 1),
        **result,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))


def _run_sampled(command: list[str], env: dict[str, str]) -> tuple[str, float]:
    """Run `command`; its output, and the largest summed RSS (MB) of it and its descendants,
    sampled every 50 ms."""
    import psutil

    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, text=True)
        root = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            total = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    total += p.memory_info().rss
            peak = max(peak, total)
            time.sleep(0.05)
        if proc.wait() != 0:
            raise SystemExit(f"the render process failed ({proc.returncode})")
        out.seek(0)
        return out.read(), peak / 1024 / 1024


if __name__ == "__main__":
    main()
