"""The ranking engine end to end on PostgreSQL at the issue's scale: 10,000 services, 50,000
call edges, 2,000 deployed project versions and 1,000,000 open findings of one team.

Measures a full ranking run (gather from PostgreSQL, rank, store), an incremental run after
one service's SBOM changed, and the first page of GET /api/v1/priorities. Needs a database
it may fill: DATABASE_URL (a fresh, migrated one is best; the bench team is replaced).

    DATABASE_URL=postgres://…/bench_rerank python bench/rerank.py [--findings 1000000]

The build ends with VACUUM ANALYZE, as autovacuum would leave the tables soon after such a
load; the clock starts after it.

`--stream` then stores a trace window the way the product does (an OTLP export of service
svc-2 through the traces ingest job, whose instrumentation scope names the component of
svc-2's findings: their reachability becomes observed), lets the evidence sweep request the
run beat would and runs it, and times from the window's job being committed to the moved
rank being read back (`seconds_from_window_to_rank`; beat's sweep interval,
TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS, adds up to that much in production).

`--incremental-runs N` ranks N - 1 more times after the first incremental run, each after
svc-3's impact changed back or again: a worker's steady state, one change after another.

Last line: {"full_seconds": …, "incremental_seconds": …, "first_page_ms": …,
            "findings": …, "peak_mb": …[, "incremental_seconds_later": […],
            "incremental_seconds_later_median": …][, "seconds_from_window_to_rank": …]
            [, "rescore_all_seconds": …, "rescore_all_incremental": …]
            [, "full_again_seconds": …], "load_average": …}

`--rescore-all` then changes every deployment's impact: the worst incremental run, one
that rescores every finding (as when every service's recent-hour rate drops to none).
`--full-again` last ranks in full over the stored queue while the worker still holds the
team's previous one, as the hourly full run of a team a worker keeps does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")

from bench._profiled import profiled  # after the path it is found on


def _copy(cur, table: str, columns: list[str], rows) -> None:
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _backend_cpu() -> float:
    """CPU seconds (user + system) of this connection's PostgreSQL backend so far, read
    from /proc when the server runs on this machine; 0 when it cannot be read. On a shared
    machine CPU time is the fairer figure: wall time mostly measures the neighbours."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build(*, findings: int, services: int, edges: int, versions: int, seed: int) -> int:
    from django.db import connection, transaction

    from trustrank.accounts.models import Team

    rnd = random.Random(seed)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    Team.objects.filter(name="bench-rerank").delete()
    team = Team.objects.create(name="bench-rerank")
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runtime_environment (team_id, name, first_seen, last_seen) "
            "VALUES (%s, 'prod', %s, %s) RETURNING id", [team.pk, now, now])
        env_id = cur.fetchone()[0]
        _copy(cur, "runtime_service", ["environment_id", "kind", "namespace", "name", "version",
                                       "attributes", "ingress_candidate", "first_seen",
                                       "last_seen"],
              [(env_id, "internet", "", "internet", "", "{}", False, now, now)]
              + [(env_id, "service", "", f"svc-{i}", "1.0", "{}", False, now, now)
                 for i in range(services)])
        cur.execute("SELECT name, id FROM runtime_service WHERE environment_id = %s", [env_id])
        sid = dict(cur.fetchall())
        # 1 % of services take internet traffic; the rest call each other.
        rows = [(env_id, sid["internet"], sid[f"svc-{i}"], now, 100, 0, 0, 0, now, [])
                for i in range(0, services, 100)]
        seen = set()
        while len(rows) < edges:
            a, b = rnd.randrange(services), rnd.randrange(services)
            if a == b or (a, b) in seen:
                continue
            seen.add((a, b))
            rows.append((env_id, sid[f"svc-{a}"], sid[f"svc-{b}"], now, rnd.randint(1, 500),
                         rnd.randint(0, 5), 0, rnd.choice((0, 1)), now, []))
        _copy(cur, "runtime_calledgebucket", ["environment_id", "caller_id", "callee_id",
                                             "bucket_start", "calls", "errors", "tls_calls",
                                             "mtls_calls", "last_seen", "hist"], rows)
        _copy(cur, "inventory_project", ["team_id", "name", "created_at"],
              [(team.pk, f"proj-{i}", now) for i in range(versions)])
        cur.execute("SELECT name, id FROM inventory_project WHERE team_id = %s", [team.pk])
        pid = dict(cur.fetchall())
        _copy(cur, "inventory_projectversion", ["uuid", "project_id", "version", "created_at",
                                               "updated_at"],
              [(str(__import__("uuid").uuid4()), pid[f"proj-{i}"], "1.0", now, now)
               for i in range(versions)])
        cur.execute("SELECT p.name, v.id, v.project_id FROM inventory_projectversion v "
                    "JOIN inventory_project p ON p.id = v.project_id WHERE p.team_id = %s",
                    [team.pk])
        pvs = {name: (vid, proj) for name, vid, proj in cur.fetchall()}
        _copy(cur, "runtime_deployment", ["environment_id", "namespace", "service_name",
                                         "project_version_id", "human_impact", "source",
                                         "set_by", "updated_at"],
              [(env_id, "", f"svc-{i}", pvs[f"proj-{i}"][0], "medium", "api", "bench", now)
               for i in range(versions)])
        # Library evidence on half the deployed services.
        _copy(cur, "runtime_librarybucket", ["service_id", "bucket_start", "kind", "name",
                                            "version", "spans"],
              [(sid[f"svc-{i}"], now, "scope", "io.opentelemetry.log4j-context-data-2.17", "",
                50) for i in range(0, versions, 2)])
        labels = ["critical", "high", "medium", "low"]
        scores = {"critical": 9.8, "high": 7.5, "medium": 5.3, "low": 3.1}
        names = [f"pkg{j}" for j in range(500)]
        def frows():
            # Generated while COPY sends them: a list of a million rows would make the
            # data generator, not the ranking run, the process's peak memory.
            for n in range(findings):
                yield finding_row(n)

        def finding_row(n: int) -> tuple:
            i = n % versions
            label = labels[n % 4]
            pkg = names[n % 500]
            in_kev = n % 997 == 0
            return (
                team.pk, "vulnerability", "", "osv", f"{n:064x}", f"advisory {n % 5000}", label,
                scores[label], "in_triage", "", "[]", "", "{}", now, now, False, now, now, "",
                pvs[f"proj-{i}"][1], pvs[f"proj-{i}"][0],
                f"pkg:maven/org.bench/{pkg}@1.0", f"pkg:maven/org.bench/{pkg}@1.0", pkg, "1.0",
                "Maven", f"org.bench:{pkg}", f"CVE-2024-{n % 5000:05d}",
                "{" + f"CVE-2024-{n % 5000:05d}" + "}", f"CVE-2024-{n % 5000:05d}",
                "affected", "bench", "[]", scores[label], in_kev,
                (now.date() if in_kev else None), (n % 100) / 100.0, (n % 100) / 100.0, "{}",
                "",
            )
        _copy(cur, "findings_finding", [
            "team_id", "kind", "category", "source", "fingerprint", "title", "severity",
            "severity_score", "state", "justification", "response", "detail", "evidence",
            "first_seen", "last_seen", "auto_resolved", "created_at", "updated_at",
            "environment", "project_id", "project_version_id", "component_key",
            "component_purl", "component_name", "component_version", "ecosystem",
            "package_name", "vuln_id", "aliases", "cve_id", "match_status", "match_reason",
            "fixed_versions", "cvss_score", "in_kev", "kev_date_added", "epss",
            "epss_percentile", "vex_evidence", "spiffe_id"],
              frows())
    with connection.cursor() as cur:
        # The state autovacuum leaves a loaded table in (its insert threshold starts a
        # vacuum within a minute of such a load): hint bits and the visibility map set,
        # statistics made. Otherwise the run's first read of a million rows just copied in
        # would also write every page of them (seconds that no later run pays). Inside a
        # transaction (the tests build with this too) VACUUM cannot run.
        cur.execute("ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE")
    return team.pk


def reusable(*, findings: int) -> int | None:
    """The bench team of an earlier build, reset to before its first ranking run (no ranks,
    runs or due dates: ranking runs write nothing else of the team), when it holds
    `findings` findings; else None."""
    from django.db import connection, transaction

    from trustrank.accounts.models import Team

    team = Team.objects.filter(name="bench-rerank").first()
    if team is None:
        return None
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM findings_finding WHERE team_id = %s", [team.pk])
        if cur.fetchone()[0] != findings:
            return None
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team.pk])
        cur.execute(
            "DELETE FROM ranking_rankchange WHERE run_id IN "
            "(SELECT id FROM ranking_rankingrun WHERE team_id = %s)", [team.pk])
        cur.execute("DELETE FROM ranking_rankingrun WHERE team_id = %s", [team.pk])
        cur.execute("DELETE FROM findings_findingdue WHERE team_id = %s", [team.pk])
        cur.execute("DELETE FROM accounts_apikey WHERE team_id = %s", [team.pk])
        # What an earlier --stream stored: its trace window's library evidence.
        cur.execute(
            "DELETE FROM runtime_librarybucket WHERE name = %s AND service_id IN (SELECT s.id "
            "FROM runtime_service s JOIN runtime_environment e ON e.id = s.environment_id "
            "WHERE e.team_id = %s)", [STREAM_SCOPE, team.pk])
        cur.execute(
            "UPDATE runtime_deployment SET human_impact = 'medium' WHERE service_name = 'svc-3' "
            "AND environment_id IN (SELECT id FROM runtime_environment WHERE team_id = %s)",
            [team.pk])
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE findings_finding")
        cur.execute("VACUUM ANALYZE ranking_rankedfinding")
        cur.execute("VACUUM ANALYZE ranking_rankchange")
        cur.execute("VACUUM ANALYZE findings_findingdue")
        # The bucket counts an earlier build's full run rebuilt: its old rows are dead, and
        # on a machine without autovacuum they pile up, one more build's worth each reuse
        # (165,000 dead against 78,000 live after two), under every run's count adjustment.
        cur.execute("VACUUM ANALYZE ranking_rankbucket")
        cur.execute("VACUUM ANALYZE ranking_rankbucketgroup")
    return team.pk


# The scope the stream's trace window names, and the component it maps to (svc-2 runs
# proj-2, whose findings are all of pkg2 at the bench's sizes: finding n is of version
# n % versions and package n % 500).
STREAM_SCOPE = "io.opentelemetry.benchlib-1.0"
STREAM_RULE = ("java_scope", "benchlib", "pkg:maven/org.bench/pkg2")


def _stream_export(service: str) -> bytes:
    """An OTLP/JSON export of one internal span of `service` in prod, under STREAM_SCOPE
    (library evidence only: no call, so the call graph stays as it was)."""
    now = time.time_ns()
    attributes = [{"key": "service.name", "value": {"stringValue": service}},
                  {"key": "deployment.environment.name", "value": {"stringValue": "prod"}}]
    span = {"traceId": os.urandom(16).hex(), "spanId": os.urandom(8).hex(),
            "name": "render", "kind": 1, "startTimeUnixNano": str(now - 5_000_000),
            "endTimeUnixNano": str(now)}
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": attributes},
        "scopeSpans": [{"scope": {"name": STREAM_SCOPE}, "spans": [span]}],
    }]}).encode()


def stream(team_id: int, profile: bool = False) -> tuple[float, dict]:
    """Store a trace window through the traces ingest job, then do what beat's evidence
    sweep and a worker do; (seconds from the job's commit to the moved rank read back,
    what the run said)."""
    from django.db import connection

    from ingest import submit
    from trustrank.accounts.models import Team
    from trustrank.accounts.principal import Principal
    from trustrank.jobs.runner import job_run
    from trustrank.ranking.models import RankingRun
    from trustrank.ranking.ranks import rank_sql
    from trustrank.ranking.services.requests import ranking_evidence_sweep
    from trustrank.ranking.services.runs import ranking_run_execute

    def ranked() -> tuple:
        with connection.cursor() as cur:
            # The version's best finding in queue order, with its rank counted from the key.
            cur.execute(
                f"SELECT r.finding_id, {rank_sql('r')}, r.decision, r.score "
                "FROM ranking_rankedfinding r JOIN findings_finding f ON f.id = r.finding_id "
                "WHERE f.team_id = %s AND f.project_version_id = (SELECT v.id FROM "
                "inventory_projectversion v JOIN inventory_project p ON p.id = v.project_id "
                "WHERE p.team_id = %s AND p.name = 'proj-2') ORDER BY r.qkey, r.finding_id "
                "LIMIT 1", [team_id, team_id])
            return cur.fetchone()

    before = ranked()
    job = submit.traces_submit(
        principal=Principal(scopes_by_team={team_id: frozenset({"traces:write"})}),
        team=Team.objects.get(pk=team_id), body=_stream_export("svc-2"), json_encoded=True,
        spans=1, priority=None, content_type="application/json")
    assert job_run(kind_name="ingest", job_id=str(job.pk)) == "done"
    stored = time.perf_counter()  # the window's job and its evidence change committed
    assert ranking_evidence_sweep() == 1  # beat's next tick
    run = RankingRun.objects.get(team_id=team_id, status="queued")
    assert profiled(lambda: ranking_run_execute(run_id=run.pk), profile) == "done"
    after = ranked()
    took = time.perf_counter() - stored
    run = RankingRun.objects.get(pk=run.pk)
    assert after != before, (before, after)
    return took, {"incremental": run.incremental, "trigger": run.trigger,
                  "timings": run.timings, "moved": run.counts.get("moved"),
                  "before": before, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--edges", type=int, default=50_000)
    parser.add_argument("--versions", type=int, default=2_000)
    parser.add_argument(
        "--reuse", action="store_true",
        help="keep the bench team's evidence and findings from an earlier build when their "
             "count matches (its ranks, runs, due dates and the changed deployment are "
             "reset, so the full run is the team's first, as after a build)")
    parser.add_argument(
        "--profile", action="store_true",
        help="profile the incremental run (cProfile): its 45 costliest calls (cumulative "
             "time), then 30 by own time")
    parser.add_argument(
        "--profile-full", action="store_true",
        help="profile the full run, as --profile does the incremental one")
    parser.add_argument(
        "--profile-stream", action="store_true",
        help="profile the run after the trace window (--stream), as --profile does")
    parser.add_argument(
        "--profile-later", action="store_true",
        help="profile the last of the later incremental runs (--incremental-runs), a "
             "worker's steady state, as --profile does the first")
    parser.add_argument(
        "--incremental-runs", type=int, default=1,
        help="incremental runs after the full one, each after svc-3's impact changed again "
             "(the first is incremental_seconds; the later ones are listed, with their "
             "median, as incremental_seconds_later[_median])")
    parser.add_argument(
        "--stream", action="store_true",
        help="after the runs, store a trace window that changes the reachability of some "
             "findings and time it to the new rank (seconds_from_window_to_rank)")
    parser.add_argument(
        "--rescore-all", action="store_true",
        help="last, change every deployment's impact and rank again: an incremental run "
             "that rescores every finding (rescore_all_seconds, and rescore_all_incremental: "
             "whether the run was incremental)")
    parser.add_argument(
        "--full-again", action="store_true",
        help="last, a full run over the stored queue while the worker holds the team's "
             "previous one, as the hourly full run of a kept team is (full_again_seconds; "
             "peak_mb then includes it)")
    args = parser.parse_args()

    import django

    django.setup()
    if args.stream:
        from django.conf import settings

        # Before the first run: the rule is part of the ranking settings every run reads.
        settings.TRUSTRANK_LIBRARY_MAP = [*settings.TRUSTRANK_LIBRARY_MAP, STREAM_RULE]
        settings.TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS = 0
    from django.test import Client

    from trustrank.accounts.models import Team
    from trustrank.accounts.services import api_key_issue
    from trustrank.ranking.models import RankingRun
    from trustrank.ranking.services.requests import ranking_run_request
    from trustrank.ranking.services.runs import ranking_run_execute

    t = time.perf_counter()
    team_id = reusable(findings=args.findings) if args.reuse else None
    if team_id is None:
        from bench.ranked_db import finding_indexes_deferred

        # The findings' secondary indexes built after the rows, not row by row (at ten
        # million the COPY alone ran past ten minutes with them).
        with finding_indexes_deferred():
            team_id = build(findings=args.findings, services=args.services,
                            edges=args.edges, versions=args.versions, seed=7)
        print(f"built {args.findings} findings in {time.perf_counter() - t:.1f} s")
    else:
        print(f"reused {args.findings} findings, reset in {time.perf_counter() - t:.1f} s")

    cpu: dict[str, float] = {}

    def run(label: str, profile: bool = False) -> float:
        r = ranking_run_request(team_id=team_id, trigger="bench", delay_seconds=0)
        pg = _backend_cpu()
        start, c = time.perf_counter(), time.process_time()
        status = profiled(lambda: ranking_run_execute(run_id=r.pk), profile)
        took, took_cpu = time.perf_counter() - start, time.process_time() - c
        pg = _backend_cpu() - pg
        r = RankingRun.objects.get(pk=r.pk)
        assert status == "done", r.error
        cpu[label] = round(took_cpu, 2)
        cpu[f"{label} postgres"] = round(pg, 2)
        print(f"{label}: {took:.2f} s ({'incremental' if r.incremental else 'full'}), "
              f"cpu {took_cpu:.2f} s, postgres backend cpu {pg:.2f} s, peak so far "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB, "
              f"load {os.getloadavg()[0]:.1f}; "
              f"timings {r.timings} counts { {k: v for k, v in r.counts.items() if k != 'by_environment'} }")
        return took

    full = run("full run", profile=args.profile_full)
    # One service's SBOM changed: its project version gets a different component.
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runtime_deployment SET human_impact = 'very high' "
            "WHERE service_name = 'svc-3' AND environment_id IN "
            "(SELECT id FROM runtime_environment WHERE team_id = %s)", [team_id])
    incremental = run("incremental run", profile=args.profile)
    # More incremental runs, each after the same deployment's impact changed back or again:
    # a worker ranking one change after another, past the first run after a full one.
    more = []
    for k in range(args.incremental_runs - 1):
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE runtime_deployment SET human_impact = %s WHERE service_name = 'svc-3' "
                "AND environment_id IN (SELECT id FROM runtime_environment WHERE team_id = %s)",
                ["medium" if k % 2 == 0 else "very high", team_id])
        last = k == args.incremental_runs - 2
        more.append(run(f"incremental run {k + 2}", profile=args.profile_later and last))

    key = api_key_issue(team=Team.objects.get(pk=team_id), name="bench", scopes=["read"]).secret
    client = Client(HTTP_X_API_KEY=key)
    client.get("/api/v1/priorities?environment=prod")  # warm: connection, caches
    times = []
    for _ in range(10):
        start = time.perf_counter()
        response = client.get("/api/v1/priorities?environment=prod")
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.content[:500]
    body = response.json()
    print(f"priorities first page: count {body['count']}, median {sorted(times)[5]:.1f} ms")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"cpu seconds: {json.dumps(cpu)}")
    out = {
        "full_seconds": round(full, 2),
        "incremental_seconds": round(incremental, 2),
        "first_page_ms": round(sorted(times)[5], 1),
        "findings": args.findings,
        "peak_mb": round(peak),
    }
    if more:
        out["incremental_seconds_later"] = [round(t, 2) for t in more]
        out["incremental_seconds_later_median"] = round(statistics.median(more), 2)
    if args.stream:
        took, said = stream(team_id, profile=args.profile_stream)
        print(f"stream: {said}")
        out["seconds_from_window_to_rank"] = round(took, 2)
        out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.rescore_all:
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE runtime_deployment SET human_impact = CASE WHEN human_impact = 'low' "
                "THEN 'high' ELSE 'low' END WHERE environment_id IN "
                "(SELECT id FROM runtime_environment WHERE team_id = %s)", [team_id])
        out["rescore_all_seconds"] = round(run("every deployment changed"), 2)
        out["rescore_all_incremental"] = bool(RankingRun.objects.filter(
            team_id=team_id).order_by("-pk").values_list("incremental", flat=True)[0])
        out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.full_again:
        from datetime import timedelta

        from trustrank.ranking.services import runs

        # What the worker keeps is used for an hour (`runs._CACHE_MAX_AGE`): past it, the
        # team's next run is full.
        runs._CACHE_MAX_AGE = timedelta(0)
        out["full_again_seconds"] = round(run("full run again"), 2)
        out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"load average: {os.getloadavg()}")
    out["load_average"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
