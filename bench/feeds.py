"""Benchmark: import the full CISA KEV catalog plus a 300,000-row FIRST EPSS CSV through the
real job handlers (claim, payload, parse, COPY/upsert, refresh of findings, completion).

The EPSS file is generated in the FIRST format (comment line, header, cve,epss,percentile)
with a fresh score date per run, so every run inserts a new day of history. Runs pinned to
one core. Needs a migrated database: DATABASE_URL (or the embedded PostgreSQL when unset).

    python bench/feeds.py [--rows 300000] [--kev tests/data/advisories/kev/known_exploited_vulnerabilities.json]

Last line: {"seconds": …, "rows": …}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")
# The jobs are run in this process; their queue messages go nowhere.
os.environ["CELERY_BROKER_URL"] = "memory://"


def make_epss(rows: int, *, score_date: date, seed: int) -> bytes:
    rng = random.Random(seed)
    lines = [
        f"#model_version:v2025.03.14,score_date:{score_date.isoformat()}T00:00:00Z",
        "cve,epss,percentile",
    ]
    n = 0
    year = 1999
    while n < rows:
        for num in range(1, 20001):
            if n >= rows:
                break
            lines.append(f"CVE-{year}-{num:04d},{rng.random() ** 4:.5f},{rng.random():.5f}")
            n += 1
        year += 1
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument(
        "--kev",
        default=str(ROOT / "tests/data/advisories/kev/known_exploited_vulnerabilities.json"),
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    import django

    django.setup()
    from ingest.models import IngestJob
    from ingest.services import job_create, job_run
    from trustrank.accounts.models import Scope, Team
    from trustrank.accounts.principal import Principal

    team, _ = Team.objects.get_or_create(name="bench")
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    kev = Path(args.kev).read_bytes()
    score_date = date(2030, 1, 1) + timedelta(days=random.randrange(20000))
    epss = make_epss(args.rows, score_date=score_date, seed=score_date.toordinal())
    print(
        f"KEV {len(kev) / 1e6:.1f} MB; EPSS {args.rows} rows, {len(epss) / 1e6:.1f} MB, {score_date}"
    )

    # Store both payloads first (what the receiver does), then time the imports.
    jobs = [
        job_create(team=team, kind=kind, payload=data, principal=principal)
        for kind, data in (("kev", kev), ("epss", epss))
    ]
    start = time.perf_counter()
    for job in jobs:
        job_run(job_id=str(job.pk))
    seconds = time.perf_counter() - start
    rows = 0
    for job in jobs:
        job = IngestJob.objects.get(pk=job.pk)
        assert job.status == "done", job.error
        rows += int(job.counts.get("entries", 0)) + int(job.counts.get("rows", 0))
        print(f"{job.kind}: {job.counts} in {job.duration_seconds:.2f} s")
    print(json.dumps({"seconds": round(seconds, 3), "rows": rows}))


if __name__ == "__main__":
    main()
