"""One worker process's cost per span: trace jobs run back to back in this process, nothing
else on the machine, without the receiver and the queueing of bench/otlp_ingest.py.

Export requests of 5,000 spans (the same SDK-encoded bodies as bench/otlp_ingest.py) are
stored as ingest jobs, then `--jobs` of them are run by the job path (claim, parse,
aggregate, store, finish) after `--warm` unmeasured ones. Printed: this process's CPU per
span (PostgreSQL's is not in it) and spans per second of wall time (PostgreSQL's included),
then the receiver's check of one request (decode and count, best of nine passes).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/trustrank \\
        python bench/otlp_job_cpu.py [--team-services 100000] [--jobs 100]

Last line: {"cpu_us_per_span": …, "spans_per_s": …, "receiver_check_ms": …}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from otlp_ingest import child_env, graph_fill, recreate_database  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--warm", type=int, default=8)
    parser.add_argument("--spans", type=int, default=5000)
    parser.add_argument("--team-services", type=int, default=0)
    args = parser.parse_args()

    env = child_env(f"bench{uuid.uuid4().hex[:6]}_")
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "TRUSTRANK_DB_NAME",
                                          "TRUSTRANK_TESTING", "DJANGO_SETTINGS_MODULE")})
    recreate_database(env)
    import django

    django.setup()
    from _otlp_spans import build_request_bytes
    from django.utils import timezone

    from ingest.services import job_create, job_run
    from trustrank.accounts.models import Team
    from trustrank.accounts.principal import principal_for_key
    from trustrank.accounts.services import api_key_issue
    from trustrank.jobs.tasks import jobs_run
    from trustrank.parsers.otlp import PROTOBUF, otlp_validate
    from trustrank.runtime.services.aggregation import span_window

    # The jobs run here: their messages are not sent to a broker.
    jobs_run.apply_async = lambda *a, **kw: None  # type: ignore[method-assign]
    team = Team.objects.create(name="bench")
    if args.team_services:
        graph_fill(team, services=args.team_services)
    key = api_key_issue(team=team, name="bench", scopes=["traces:write"]).api_key
    bodies = [build_request_bytes(args.spans, seed=i) for i in range(8)]
    total = args.warm + args.jobs
    ids = [
        job_create(team=team, kind="traces", payload=bodies[i % 8],
                   principal=principal_for_key(key), params={"encoding": "protobuf"}).id
        for i in range(total)
    ]
    for job_id in ids[: args.warm]:
        job_run(job_id=job_id)
    cpu, wall = time.process_time(), time.perf_counter()
    for job_id in ids[args.warm:]:
        job_run(job_id=job_id)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    spans = args.jobs * args.spans

    window = span_window(now=timezone.now())
    passes = []
    for _ in range(9):
        started = time.process_time()
        for i in range(50):
            otlp_validate(bodies[i % 8], encoding=PROTOBUF, window=window)
        passes.append((time.process_time() - started) / 50 * 1000)
    print(f"{args.jobs} trace jobs of {args.spans:,} spans, the team's graph holding "
          f"{args.team_services:,} services: {cpu:.2f} s of this process's CPU, {wall:.2f} s "
          f"of wall time; the receiver's check of one request {min(passes):.2f} ms")
    print(json.dumps({
        "cpu_us_per_span": round(cpu / spans * 1e6, 2),
        "spans_per_s": round(spans / wall),
        "receiver_check_ms": round(min(passes), 2),
    }))


if __name__ == "__main__":
    main()
