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
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

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


def kept_latest(key: str) -> Kept | None:
    """The latest done page of `key`, if any."""
    row = (FindingGroupsJob.objects.filter(key=key, status=JobStatus.DONE)
           .order_by("-finished_at", "-pk").values_list("page", "generation", "finished_at")
           .first())
    if row is None or row[0] is None or row[2] is None:
        return None
    try:
        # Made again field by field: a page pickled before a field was added fails here,
        # and counts as none (the page is computed again), not later in a template.
        page = replace(pickle.loads(bytes(row[0])))  # noqa: S301 (our own rows)
    except Exception:
        return None
    return Kept(page, row[1], row[2])


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


def refresh_request(ask: PageAsk) -> None:
    """A job to group `ask` again, unless one is queued or running for its key, or one
    failed within `FAILED_PAUSE`."""
    if FindingGroupsJob.objects.filter(
            key=ask.key, status=JobStatus.FAILED,
            finished_at__gte=timezone.now() - FAILED_PAUSE).exists():
        return
    try:
        with transaction.atomic():
            job = _row(ask)
            job.save()
            job_enqueue_on_commit(job)
    except IntegrityError:  # one is pending (`findinggroups_one_pending`)
        return


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
