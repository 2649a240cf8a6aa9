"""Webhook fan-out: one ranking run changes the decision of 10,000 findings, and five
endpoints listen to `finding.decision_changed` (50,000 deliveries).

Measures what webhooks add to the ranking run (the same run with and without them: the run
writes one notify row, whatever the number of changes) and how fast the worker's
`notify_dispatch` job fans the batch out and delivers it (the handler the Celery worker
runs, run here in forked processes as a worker's would be: the batch, then each webhook's
round as it is committed) to five local receivers (asyncio HTTP/1.1 keep-alive servers, each
in a process of its own). Needs a database it may fill: DATABASE_URL names a server; the
bench makes its own database `bench_webhooks` there.

    DATABASE_URL=postgres://…/postgres python bench/webhooks.py [--changes 10000]

The changes are made real: before each measured run the stored decisions are swapped
(immediate ↔ another), so the run finds every finding's decision changed and stores them as
it would after new evidence.

Last line: {"deliveries_per_s": …, "ranking_run_delay_s": …, "deliveries": …,
            "run_without_s": …, "run_with_s": …, "load_average": […]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")

ENDPOINTS = 5


def _serve(port_queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """A minimal HTTP/1.1 receiver answering 200 to every POST, keeping connections open."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


def _receivers() -> tuple[list[multiprocessing.Process], list[int]]:
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    procs = [multiprocessing.Process(target=_serve, args=(queue,), daemon=True)
             for _ in range(ENDPOINTS)]
    for p in procs:
        p.start()
    return procs, [queue.get(timeout=30) for _ in procs]


def _swap_decisions(team_id: int) -> None:
    """Make the stored queue differ from what the next run computes, for every finding."""
    from django.db import connection

    from trustrank.ranking.services import runs

    runs._PREVIOUS.clear()  # a full run: it compares with the stored rows
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE ranking_rankedfinding SET decision = CASE WHEN decision = 'immediate' "
            "THEN 'scheduled' ELSE 'immediate' END WHERE team_id = %s", [team_id])


def _ranking_run(team_id: int) -> tuple[float, int]:
    from trustrank.ranking.services.requests import ranking_run_request
    from trustrank.ranking.services.runs import ranking_run_execute

    _swap_decisions(team_id)
    run = ranking_run_request(team_id=team_id, trigger="bench", delay_seconds=0)
    started = time.perf_counter()
    status = ranking_run_execute(run_id=run.pk)
    elapsed = time.perf_counter() - started
    assert status == "done", status
    return elapsed, run.pk


def _run_job(batch_id: int) -> None:
    from django.db import connections

    from trustrank.jobs.runner import job_run

    connections.close_all()  # the parent's, inherited by the fork: never shared
    job_run(kind_name="notify_dispatch", job_id=str(batch_id))
    connections.close_all()


def _run_job(batch_id: int) -> None:
    from django.db import connections

    from trustrank.jobs.runner import job_run

    connections.close_all()  # the parent's, inherited by the fork: never shared
    job_run(kind_name="notify_dispatch", job_id=str(batch_id))
    connections.close_all()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    procs, ports = _receivers()
    env = dict(os.environ)
    base = env.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/bench_webhooks"
    env["TRUSTRANK_OUTBOUND_ALLOW_PRIVATE"] = "1"
    env.setdefault("TRUSTRANK_QUEUE_PREFIX", f"bench-webhooks-{os.getpid()}-")
    from bench.ranked_db import BENCH_TEAM, ranked_database_prepare

    ranked_database_prepare(env, name="bench_webhooks", findings=args.changes, reuse=True,
                            services=50, edges=100, versions=20)
    from trustrank.accounts.models import Team
    from trustrank.notify.models import Delivery, NotifyBatch, Webhook
    from trustrank.ranking.models import RankChange

    team = Team.objects.get(name=BENCH_TEAM)
    Webhook.objects.filter(team=team).delete()
    NotifyBatch.objects.all().delete()

    for port in ports:
        Webhook.objects.create(team=team, url=f"http://127.0.0.1:{port}/hook",
                               events=["finding.decision_changed"], secret="bench")
    # Alternated, the best of each: the machine's other load moves both alike.
    _ranking_run(team.pk)  # warm-up (connections to the database and the broker)
    without_runs, with_runs = [], []
    run_id = 0
    for _ in range(args.rounds):
        Webhook.objects.filter(team=team).update(enabled=False)
        without_runs.append(_ranking_run(team.pk)[0])
        Webhook.objects.filter(team=team).update(enabled=True)
        NotifyBatch.objects.all().delete()
        elapsed, run_id = _ranking_run(team.pk)
        with_runs.append(elapsed)
    without, with_hooks = min(without_runs), min(with_runs)
    changed = RankChange.objects.filter(run_id=run_id).exclude(decision="").count()
    (batch,) = NotifyBatch.objects.filter(source="ranking_run", ref_id=run_id)
    print(f"run: {changed} decisions changed; without webhooks {without:.2f} s, "
          f"with {with_hooks:.2f} s")

    # As Celery worker processes would: one runs the batch (fan-out, then the first
    # webhook's deliveries), others each run a webhook's round as soon as it is committed.
    from django.db import connections

    connections.close_all()
    fork = multiprocessing.get_context("fork")
    started = time.perf_counter()
    workers = [fork.Process(target=_run_job, args=(batch.pk,))]
    workers[0].start()
    rounds: set[int] = set()
    while len(rounds) < ENDPOINTS - 1 and workers[0].is_alive():
        fresh = set(NotifyBatch.objects.filter(source="deliver").values_list("pk", flat=True))
        connections.close_all()
        for pk in sorted(fresh - rounds):
            worker = fork.Process(target=_run_job, args=(pk,))
            worker.start()
            workers.append(worker)
        rounds |= fresh
        time.sleep(0.02)
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    delivered = Delivery.objects.filter(status="delivered").count()
    total = Delivery.objects.count()
    print(f"dispatch by {len(workers)} processes: {delivered}/{total} delivered in "
          f"{elapsed:.1f} s")
    for p in procs:
        p.terminate()
    print(json.dumps({
        "deliveries_per_s": round(delivered / elapsed, 1),
        "ranking_run_delay_s": round(with_hooks - without, 3),
        "deliveries": delivered,
        "run_without_s": round(without, 3),
        "run_with_s": round(with_hooks, 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
