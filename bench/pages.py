"""Every page and list a team opens, timed on a database a scale bench left: which of them a
team of that size waits for.

Reads the database `bench/rerank.py` built (DATABASE_URL; its team `bench-rerank`, ten
million findings at the issue's scale) and writes nothing but a member of that team to
log in with (`bench-pages`). Each path is requested in this process through Django's test
client, as that member, `--repeats` times; a path's figure is its best time (the first
request of a path also reads its pages of the database from disk). What a page keeps under
the findings generation (totals, finding groups) is kept in this process's cache, so the
first request computes it and the later ones read it: `first` lists each path's first time.

    DATABASE_URL=postgres://…/trustrank_bench_rerank10m python bench/pages.py [PATH …]

A groups page too long for a request is answered "being grouped" while a job groups it
(`being_grouped`): the jobs then run here (`grouped_s`) and those paths are asked again
(`grouped`).

With `--moved`, one finding of the team is then written and the group paths asked again:
a page that took long is answered as it was while a job groups it again (`moved`: seconds
and whether it said so), the jobs run here (`regrouped_s`), and the paths once more
(`after`).

Last line: {"<path>": seconds, …, "slowest": "<path>", "first": {"<path>": seconds, …},
"load_average": …}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")
os.environ.setdefault("TRUSTRANK_TESTING", "1")
# The regroupings this bench queues run here at once, not a minute after the last.
os.environ.setdefault("TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS", "0")

TEAM = "bench-rerank"
MEMBER = "bench-pages"
PATHS = (
    "/",
    "/findings/",
    "/findings/?ordering=rank",
    "/findings/?q=pkg345",
    "/findings/groups/?by=fix",
    "/findings/groups/?by=vulnerability",
    "/projects/",
    "/services/",
    "/services/?exposure=small",
    "/exports/",
    "/api/v1/findings?ordering=rank",
    "/api/v1/priorities",
    "/api/v1/environments/prod/services",
    "/api/v1/environments/prod/services?exposure=small",
    "/api/v1/findings/groups?by=fix",
    "/api/v1/findings/groups?by=vulnerability",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", default=list(PATHS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--moved", action="store_true",
        help="after the paths, write one of the team's findings (its generation moves) and "
             "time the group paths again (a kept page is shown while a job groups it again: "
             "`moved`), run the jobs that queued in this process (`regrouped_s`), and time "
             "them once more (`after`)")
    args = parser.parse_args()

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from trustrank.accounts.models import Membership, Role, Team

    team = Team.objects.filter(name=TEAM).first()
    if team is None:
        sys.exit(f"no team {TEAM!r} here: run bench/rerank.py on this database first")
    user, _ = get_user_model().objects.get_or_create(username=MEMBER)
    Membership.objects.update_or_create(team=team, user=user, defaults={"role": Role.ADMIN})
    client = Client()
    client.force_login(user)
    figures: dict[str, float] = {}
    first: dict[str, float] = {}
    pending: list[str] = []
    for path in args.paths:
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            response = client.get(path, HTTP_HOST="localhost")
            times.append(time.perf_counter() - started)
            if _pending(path, response):
                pending.append(path)
            elif response.status_code != 200:
                sys.exit(f"{path}: {response.status_code}")
        figures[path], first[path] = round(min(times), 3), round(times[0], 3)
        print(f"{path}: {min(times):.3f} s (first {times[0]:.3f} s)"
              f"{', being grouped' if path in pending else ''}", flush=True)
    slowest = max(figures, key=figures.__getitem__)
    extra: dict[str, Any] = {}
    if pending:
        # Pages too long for a request: the first grouping, by the jobs they queued.
        extra["being_grouped"] = sorted(set(pending))
        extra["grouped_s"] = _jobs_run()
        extra["grouped"] = _timed(client, sorted(set(pending)), "grouped")
    if args.moved:
        extra.update(_moved(client, team, [p for p in args.paths if "groups" in p]))
    print(json.dumps({**figures, "slowest": slowest, "first": first, **extra,
                      "load_average": round(os.getloadavg()[0], 2)}))


def _pending(path: str, response: Any) -> bool:
    """Whether `response` says the page is being grouped for the first time (a job does)."""
    if path.startswith("/api/"):
        return response.status_code == 202
    return response.status_code == 200 and 'data-testid="groups-pending"' in (
        response.content.decode())


def _jobs_run() -> float:
    """Run the queued groupings here; their seconds."""
    from trustrank.findings.records import FindingGroupsJob
    from trustrank.jobs.models import JobStatus
    from trustrank.jobs.runner import job_run

    started = time.perf_counter()
    for pk in FindingGroupsJob.objects.filter(status=JobStatus.QUEUED).values_list(
            "pk", flat=True):
        job_run(kind_name="finding_groups", job_id=str(pk))
    seconds = round(time.perf_counter() - started, 3)
    print(f"grouped by jobs: {seconds:.3f} s", flush=True)
    return seconds


def _timed(client: Any, paths: list[str], label: str) -> dict[str, Any]:
    """Each of `paths` once: seconds, and whether it said it is being grouped (again)."""
    out = {}
    for path in paths:
        started = time.perf_counter()
        response = client.get(path, HTTP_HOST="localhost")
        seconds = round(time.perf_counter() - started, 3)
        refreshing = 'data-testid="groups-refreshing"' in response.content.decode() or (
            path.startswith("/api/") and response.json().get("refreshing"))
        out[path] = {"seconds": seconds, "refreshing": bool(refreshing),
                     "pending": _pending(path, response)}
        print(f"{label} {path}: {seconds:.3f} s, refreshing {bool(refreshing)}", flush=True)
    return out


def _moved(client: Any, team: Any, paths: list[str]) -> dict[str, Any]:
    """The group paths after one finding was written: each answered, whether it said it is
    being grouped again, then the queued regroupings run here and the paths again."""
    from trustrank.findings.models import Finding

    finding = Finding.objects.filter(team=team).order_by("pk").first()
    assert finding is not None
    finding.save(update_fields=["updated_at"])
    moved = _timed(client, paths, "moved")
    regrouped = _jobs_run()
    return {"moved": moved, "regrouped_s": regrouped, "after": _timed(client, paths, "after")}


if __name__ == "__main__":
    main()
