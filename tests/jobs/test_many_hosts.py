"""What more than one host needs: nothing a process remembers may be wrong once another host
changed the database, one sweep at a time however many beats, caches the hosts can share, and
the compose file's layout (two workers, one beat, export storage shared by web and workers)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import date, timedelta
from pathlib import Path

import psycopg
import pytest
import yaml
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tests.conftest import ROOT, subprocess_env
from trustrank.cluster.services.metrics import minutes_partition_ensure, partition_name
from trustrank.jobs.models import JobStatus
from trustrank.jobs.sweep import jobs_sweep
from trustrank.ranking.models import RankingRun

COMPOSE = ROOT / "docker" / "compose.yaml"


def _exists(name: str) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cur.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_day_partition_dropped_by_another_host_is_made_again():
    day = date(2026, 3, 1)  # committed, as a load commits it
    minutes_partition_ensure(days=[day])
    assert _exists(partition_name(day))
    # Retention on another worker host drops the day; this process made it earlier.
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE {partition_name(day)}")
    minutes_partition_ensure(days=[day])
    assert _exists(partition_name(day))
    with connection.cursor() as cur:
        cur.execute(f"DROP TABLE {partition_name(day)}")


def _dsn() -> str:
    db = settings.DATABASES["default"]
    return psycopg.conninfo.make_conninfo(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
        password=db["PASSWORD"] or None, dbname=db["NAME"],
    )


@pytest.mark.django_db
def test_a_sweep_started_while_another_runs_skips(team):
    # A job whose worker died: its lease lapsed.
    run = RankingRun.objects.create(
        team=team, status=JobStatus.RUNNING, attempts=1, started_at=timezone.now(),
        lease_until=timezone.now() - timedelta(seconds=5),
    )
    # Another beat's sweep (another host, another session) holds the sweep's lock.
    with psycopg.connect(_dsn(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtextextended('jobs:sweep', 0))")
        skipped = jobs_sweep()
        assert skipped["skipped"] == 1 and skipped["requeued"] == 0
        run.refresh_from_db()
        assert run.status == JobStatus.RUNNING
        other.execute("SELECT pg_advisory_unlock(hashtextextended('jobs:sweep', 0))")
    # The other sweep finished: the next one does the work.
    swept = jobs_sweep()
    assert swept["skipped"] == 0 and swept["requeued"] == 1
    run.refresh_from_db()
    assert run.status == JobStatus.QUEUED


_CACHE_SCRIPT = """
import sys, django
django.setup()
from django.core.cache import cache
key, value = sys.argv[1], sys.argv[2]
if value == "-":
    print(cache.get(key))
    cache.delete(key)
else:
    cache.set(key, value, 60)
"""


@pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis://"), reason="needs the Redis broker"
)
def test_two_hosts_share_the_redis_cache(tmp_path):
    """TRUSTRANK_CACHE=redis: a total one web host counted is read by another (each host
    has its own TRUSTRANK_VAR_DIR, so the file cache could not)."""
    key = f"many-hosts-{uuid.uuid4().hex}"

    def host(name: str, *args: str) -> str:
        env = subprocess_env(
            TRUSTRANK_CACHE="redis", TRUSTRANK_CACHE_URL=settings.CELERY_BROKER_URL,
            TRUSTRANK_VAR_DIR=str(tmp_path / name),
        )
        done = subprocess.run(
            [sys.executable, "-c", _CACHE_SCRIPT, key, *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=60, check=True,
        )
        return done.stdout.strip()

    host("web-a", "1234")
    assert host("web-b", "-") == "1234"
    assert host("web-b", "-") == "None"  # deleted by the read above


def test_redis_cache_without_its_url_is_refused(tmp_path):
    env = subprocess_env(TRUSTRANK_CACHE="redis", TRUSTRANK_VAR_DIR=str(tmp_path))
    env.pop("TRUSTRANK_CACHE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "TRUSTRANK_CACHE_URL" in done.stderr


def test_the_compose_file_runs_two_workers_one_beat_and_shares_the_exports():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) >= {"postgres", "redis", "migrate", "web", "worker", "beat"}
    worker, web, beat = services["worker"], services["web"], services["beat"]
    assert worker["deploy"]["replicas"] == 2
    assert worker["command"][:4] == ["celery", "-A", "trustrank", "worker"]
    assert worker["command"][worker["command"].index("-Q") + 1] == "ingest_high,ingest,batch"
    assert beat["command"][:4] == ["celery", "-A", "trustrank", "beat"]
    assert "deploy" not in beat  # one beat, never scaled
    # Web and workers: one export storage, one broker, one cache, one env file (SECRET_KEY,
    # DATABASE_URL); beat needs no export storage.
    exports_dir = web["environment"]["TRUSTRANK_EXPORT_DIR"]
    for service in (web, worker):
        assert f"exports:{exports_dir}" in service["volumes"]
        assert service["environment"]["TRUSTRANK_EXPORT_DIR"] == exports_dir
    assert "exports" in compose["volumes"]
    for service in (web, worker, beat, services["migrate"]):
        assert service["env_file"] == "trustrank.env"
        assert service["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        assert service["environment"]["TRUSTRANK_CACHE"] == "redis"


def test_the_compose_file_is_valid_for_docker_compose_where_it_is_installed(tmp_path):
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False) \
        if Path("/usr/bin/docker").exists() or Path("/usr/local/bin/docker").exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip("docker compose is not installed here (the YAML test above still runs)")
    env_file = COMPOSE.parent / "trustrank.env"
    made = not env_file.exists()
    if made:
        env_file.write_text((COMPOSE.parent / "trustrank.env.example").read_text())
    try:
        subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "-q"], check=True,
                       timeout=60)
    finally:
        if made:
            env_file.unlink()

