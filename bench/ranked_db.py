"""A bench database of generated, ranked findings (bench/rerank.py's generator and one full
ranking run), made once and reused with `--reuse` when it already holds as many findings.
Shared by the benches that read such findings (findings_list.py, report.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_TEAM = "bench-rerank"  # the name bench/rerank.py's generator gives its team


def admin_url(env: dict[str, str]) -> str:
    return env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"


@contextmanager
def finding_indexes_deferred() -> Iterator[None]:
    """The findings table's secondary indexes dropped while the rows are copied in, built
    again after: maintaining a trigram GIN index and sixteen btrees row by row made a
    10,000,000-finding build take over an hour; built at the end they take minutes. Foreign
    keys are not checked meanwhile (session_replication_role; the bench connects as a
    superuser)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'findings_finding'"
            " AND indexname NOT IN (SELECT conname FROM pg_constraint"
            "  WHERE conrelid = 'findings_finding'::regclass)"
        )
        indexes = cur.fetchall()
        for name, _ in indexes:
            cur.execute(f'DROP INDEX "{name}"')
        # The generator's rows reference the rows it made: its foreign keys hold. Checked at
        # COMMIT (Django's constraints are deferred), 10,000,000 rows took a quarter hour
        # more.
        cur.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("SET session_replication_role = DEFAULT")
    with connection.cursor() as cur:
        cur.execute("SET maintenance_work_mem = '1GB'")
        for _, definition in indexes:
            cur.execute(definition)
        cur.execute("ANALYZE findings_finding")


def ranked_database_prepare(
    env: dict[str, str], *, name: str, findings: int, reuse: bool,
    services: int, edges: int, versions: int,
) -> None:
    """Create (or, with `reuse`, keep) database `name`, migrate it, set Django up in this
    process on `env`, and fill it unless it already holds `findings` findings."""
    import psycopg

    with psycopg.connect(admin_url(env), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not reuse:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or not reuse:
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    os.environ.update(env)
    import django

    django.setup()
    from trustrank.accounts.models import Team
    from trustrank.findings.models import Finding

    team = Team.objects.filter(name=BENCH_TEAM).first()
    if reuse and team and Finding.objects.filter(team=team).count() == findings:
        print(f"reusing {findings} findings of team {team.pk}")
        return
    from bench.rerank import build
    from trustrank.ranking.services.requests import ranking_run_request
    from trustrank.ranking.services.runs import ranking_run_execute

    started = time.perf_counter()
    with finding_indexes_deferred():
        team_id = build(
            findings=findings, services=services, edges=edges, versions=versions, seed=7
        )
    print(f"built {findings} findings in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    run = ranking_run_request(team_id=team_id, trigger="bench", delay_seconds=0)
    status = ranking_run_execute(run_id=run.pk)
    print(f"ranking run {status} in {time.perf_counter() - started:.0f} s")
    # As autovacuum would soon after the run's load (it is off on some machines, CI's
    # among them): the visibility map set, so the findings list's probes of the ranked
    # rows' primary key read no heap (before this, 20,000 heap fetches in a narrow search
    # at ten million findings).
    from django.db import connection

    with connection.cursor() as cur:
        for table in ("ranking_rankedfinding", "findings_findingdue"):
            cur.execute(f"VACUUM ANALYZE {table}")
