"""Pages of finding groups that take long, kept in PostgreSQL and grouped again by a worker.

At ten million findings a groups page is an aggregate of every open finding: ~25 s. The
shared cache keeps a page under the findings' generation (`groups.finding_groups`), but
the generation moves with every write and every ranking run, and a large estate whose
traces re-rank it every few seconds would have each view wait for the aggregate again.

A page that took `TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS` or more is kept as a
`FindingGroupsJob` row under a key without the generation. Once the generation moved on,
a request is answered at once with that page, marked as of when it was computed and
`refreshing`, and a job of the kind "finding_groups" (batch work: one at a time per page,
fair among teams) groups it again at the new generation. A worker killed on the way
leaves the job to be run again; the kept page stays until a newer one is done. The job's
handler is the ranking app's (`ranking.services.group_jobs`): the page's ranks are counted there."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg.errors import QueryCanceled

from trustrank.findings.group_shapes import GroupPage
from trustrank.findings.records import FindingGroupsJob
from trustrank.jobs.models import JobClass, JobStatus
from trustrank.jobs.send import job_enqueue_on_commit


@dataclass(frozen=True)
class PageAsk:
    """What a groups page was asked for: the teams, the query string the findings FilterSet
    read, `by` and the slice; `key` names it apart from the generation."""

    team_ids: tuple[int, ...]
    filter: dict[str, list[str]]
    by: str
    limit: int
    offset: int
    key: str


@dataclass(frozen=True)
class Kept:
    page: GroupPage
    generation: str
    at: datetime


def kept_latest(key: str) -> tuple[Kept | None, bool]:
    """(The latest done page of `key`, if any; whether a job is queued or running for it),
    in one statement (an index entry of each: `findinggroups_key_done`,
    `findinggroups_one_pending`)."""
    table = FindingGroupsJob._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT d.page, d.generation, d.finished_at, EXISTS ("  # noqa: S608 (our table)
            f"  SELECT 1 FROM {table} WHERE key = %s AND status IN (%s, %s)) "
            f"FROM (SELECT 1) one LEFT JOIN LATERAL ("
            f"  SELECT page, generation, finished_at FROM {table} "
            f"  WHERE key = %s AND status = %s ORDER BY finished_at DESC, id DESC LIMIT 1"
            f") d ON true",
            [key, JobStatus.QUEUED, JobStatus.RUNNING, key, JobStatus.DONE])
        page, generation, at, pending = cur.fetchone()
    if page is None or at is None:
        return None, pending
    try:
        # Made again field by field: a page pickled before a field was added fails here,
        # and counts as none (the page is computed again), not later in a template.
        kept = replace(pickle.loads(bytes(page)))  # noqa: S301 (our own rows)
    except Exception:
        return None, pending
    return Kept(kept, generation, at), pending


def _row(ask: PageAsk, **fields: Any) -> FindingGroupsJob:
    return FindingGroupsJob(
        team_id=min(ask.team_ids), team_ids=list(ask.team_ids), key=ask.key, filter=ask.filter,
        by=ask.by, limit=ask.limit, offset=ask.offset, job_class=JobClass.BATCH, **fields)


def page_keep(ask: PageAsk, *, page: GroupPage, generation: str, seconds: float) -> None:
    """Keep a page a web request computed (a done row; the key's older ones go)."""
    now = timezone.now()
    with transaction.atomic():
        _row(ask, status=JobStatus.DONE, phase=JobStatus.DONE, worker="web", started_at=now,
             finished_at=now, generation=generation, page=page_pickled(page),
             seconds=seconds).save()
        older_dropped(ask.key, team_id=min(ask.team_ids), before=now)


# After a regrouping of a page failed, the next is asked for no sooner than this: a view
# per second of a page whose grouping fails must not queue a job per view.
FAILED_PAUSE = timedelta(minutes=1)


def refresh_request(ask: PageAsk, *, not_before: datetime | None = None) -> None:
    """A job to group `ask` again, not before `not_before` (now when None or past), unless
    one is queued or running for its key, or one failed within `FAILED_PAUSE`."""
    now = timezone.now()
    if FindingGroupsJob.objects.filter(
            key=ask.key, status=JobStatus.FAILED, finished_at__gte=now - FAILED_PAUSE).exists():
        return
    ready = max(now, not_before) if not_before is not None else now
    try:
        with transaction.atomic():
            job = _row(ask, not_before=ready)
            job.save()
            job_enqueue_on_commit(job, countdown=(ready - now).total_seconds())
    except IntegrityError:  # one is pending (`findinggroups_one_pending`)
        return


def regroup_after(kept: Kept) -> datetime:
    """When a kept page may be grouped again (`TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS`
    after it was)."""
    return kept.at + timedelta(seconds=settings.TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS)


def page_pending(by: str) -> GroupPage:
    """The answer while a page none is kept of is grouped for the first time."""
    return GroupPage(by=by, count=0, groups=[], as_of=None, refreshing=True)


class OverBudget(Exception):
    """A page's statement ran past the request's budget and was cancelled; a job groups it."""


@contextmanager
def cancelled_over_budget() -> Iterator[None]:
    """`OverBudget` for a statement the budget cancelled (`groups._tune`: the web
    request's `TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS`; a job has its own statement
    timeout, `jobs.runner.job_session`), other errors as they are."""
    try:
        yield
    except OperationalError as exc:
        if isinstance(exc.__cause__, QueryCanceled):
            raise OverBudget from exc
        raise


def page_stale(kept: Kept) -> GroupPage:
    return replace(kept.page, as_of=kept.at, refreshing=True)


def page_pickled(page: GroupPage) -> bytes:
    return pickle.dumps(replace(page, as_of=None, refreshing=False),
                        protocol=pickle.HIGHEST_PROTOCOL)


# A kept page of the team no view asked for again in this long goes when another is kept.
KEPT_DAYS = 7


def older_dropped(key: str, *, team_id: int, before: datetime) -> None:
    """The key's finished pages before `before` (a newer one is kept), and the team's
    finished pages older than `KEPT_DAYS`."""
    finished = FindingGroupsJob.objects.filter(
        status__in=[JobStatus.DONE, JobStatus.FAILED])
    (finished.filter(key=key, finished_at__lt=before)
     | finished.filter(team_id=team_id, finished_at__lt=before - timedelta(days=KEPT_DAYS))
     ).delete()
