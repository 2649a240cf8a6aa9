"""Reading a bench/scaleout.py round back from its database: lost and duplicated jobs, the
measured window, whether every job has finished; the broker's leftover queues; the cores
the machine kept busy."""

from __future__ import annotations

from typing import Any

from bench._scaleout_hosts import HOSTS_DIR

ROUND_DB = "trustrank_bench_scaleout"


def _admin_url(env: dict[str, str]) -> str:
    return env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"


def _db(env: dict[str, str]) -> Any:
    import psycopg

    return psycopg.connect(_admin_url(env).rsplit("/", 1)[0] + f"/{ROUND_DB}", autocommit=True)


JOB_TABLES = ("ingest_ingestjob", "ranking_rankingrun", "exports_export", "cluster_replayrun")


def _scalar(conn: Any, sql: str, params: Any = None) -> Any:
    return conn.execute(sql, params).fetchone()[0]


def round_check(env: dict[str, str], sent: dict[str, Any], seeded: dict[str, Any]) -> dict[str, Any]:
    """Lost, duplicated and the measured window, from the database."""
    with _db(env) as conn:
        expected = {"sbom": len(sent["sbom"]), "traces": sent["traces"],
                    "telemetry": sent["metrics"]}
        lost = duplicated = 0
        for kind, count in expected.items():
            rows = _scalar(conn, "SELECT count(*) FROM ingest_ingestjob WHERE kind = %s", [kind])
            done = _scalar(conn, "SELECT count(*) FROM ingest_ingestjob "
                                 "WHERE kind = %s AND status = 'done'", [kind])
            lost += count - min(done, count)
            duplicated += max(0, rows - count)
        ids = [int(i) for i in sent["ranking"]]
        lost += len(ids) - _scalar(conn, "SELECT count(*) FROM ranking_rankingrun "
                                         "WHERE id = ANY(%s) AND status = 'done'", [ids])
        exports = [int(i) for i in sent["export"]]
        lost += len(exports) - _scalar(conn, "SELECT count(*) FROM exports_export "
                                             "WHERE id = ANY(%s) AND status = 'done'", [exports])
        replays = [int(i) for i in sent["replay"]]
        lost += len(replays) - _scalar(conn, "SELECT count(*) FROM cluster_replayrun WHERE id = "
                                             "ANY(%s) AND status = 'done' AND result::text "
                                             "<> '{}'", [replays])
        # An effect applied twice: an SBOM stored twice, a team ranked more often than asked,
        # an export audited twice (or with more rows than its team has findings).
        duplicated += _scalar(conn, "SELECT count(*) FROM (SELECT job_id FROM inventory_sbom "
                                    "GROUP BY job_id HAVING count(*) > 1) AS x")
        duplicated += _scalar(conn, "SELECT count(*) FROM ranking_rankingrun WHERE status = "
                                    "'done' AND team_id IN (SELECT team_id FROM "
                                    "ranking_rankingrun WHERE id = ANY(%s))", [ids]) - len(ids)
        duplicated += _scalar(conn, "SELECT count(*) FROM (SELECT subject_id FROM "
                                    "findings_auditevent WHERE action = 'export' "
                                    "GROUP BY 1 HAVING count(*) > 1) AS x")
        duplicated += _scalar(conn, "SELECT count(*) FROM exports_export WHERE id = ANY(%s) "
                                    "AND rows > %s", [exports, seeded["findings"]])
        window = conn.execute(
            "SELECT min(s), max(f), sum(n) FROM ("
            + " UNION ALL ".join(
                f"SELECT min(started_at) AS s, max(finished_at) AS f, count(*) AS n "
                f"FROM {t} WHERE status = 'done' AND started_at >= %s" for t in JOB_TABLES)
            + ") AS x", [sent["pushed_at"]] * len(JOB_TABLES)).fetchone()
        retried = sum(_scalar(conn, f"SELECT count(*) FROM {t} WHERE attempts > 1")
                      for t in JOB_TABLES)
    seconds = (window[1] - window[0]).total_seconds()
    return {"jobs": int(window[2]), "seconds": seconds, "lost": lost,
            "duplicated": duplicated, "retried": retried}


def all_done(env: dict[str, str], sent: dict[str, Any]) -> bool:
    total = (len(sent["sbom"]) + sent["traces"] + sent["metrics"] + len(sent["ranking"])
             + len(sent["export"]) + len(sent["replay"]))
    with _db(env) as conn:
        finished = sum(_scalar(conn, f"SELECT count(*) FROM {t} WHERE started_at >= %s "
                                     "AND status IN ('done', 'failed')", [sent["pushed_at"]])
                       for t in JOB_TABLES)
        failed = sum(_scalar(conn, f"SELECT count(*) FROM {t} WHERE status = 'failed'")
                     for t in JOB_TABLES)
    if failed:
        raise SystemExit(f"{failed} jobs failed: see the worker logs under {HOSTS_DIR}")
    return finished >= total


def queues_drop(env: dict[str, str]) -> None:
    broker = env["CELERY_BROKER_URL"]
    prefix = env["TRUSTRANK_QUEUE_PREFIX"]
    if broker.startswith("redis://"):
        import redis

        client = redis.Redis.from_url(broker)
        stale = [*client.scan_iter(f"{prefix}*"), *client.scan_iter(f"_kombu.binding*.{prefix}*")]
        if stale:
            client.delete(*stale)
    else:
        from kombu import Connection

        with Connection(broker) as conn:
            channel = conn.channel()
            for name in ("hold", "ingest_high", "ingest", "batch"):
                try:
                    channel.queue_delete(f"{prefix}{name}")
                except Exception:
                    continue


def process_cpu_jiffies(pid: int) -> int:
    """A process's own CPU time so far (user and system), in jiffies (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _cpu_jiffies() -> tuple[int, int]:
    """(all, idle) CPU time of the machine so far, in jiffies (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]
