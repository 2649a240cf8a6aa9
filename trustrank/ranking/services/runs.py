"""Executing a ranking run: claim it, gather the inputs, rank (incrementally from the
previous run this worker kept), store."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.findings.services.due_dates import (
    PolicyDays,
    triage_policy_for,
)
from trustrank.lib.locks import advisory_lock_wait
from trustrank.notify.events import notify_ranking_run
from trustrank.ranking.inputs import (
    Gathered,
    changed_between,
    rank_settings,
    ranking_inputs_gather,
)
from trustrank.ranking.models import RankingRun, RunStatus
from trustrank.ranking.ranks import CLOCK_SKEW
from trustrank.ranking.services.due import (
    DueInserter,
    due_dates_apply,
    due_dates_unsettled,
)
from trustrank.ranking.services.run_digests import MODULUS as _MODULUS
from trustrank.ranking.services.run_digests import Meanwhile as _Meanwhile
from trustrank.ranking.services.run_digests import row_hashes as _row_hashes
from trustrank.ranking.services.run_digests import rows_digest as _rows_digest
from trustrank.ranking.services.run_digests import rows_digest_update as _rows_digest_update
from trustrank.ranking.services.side import SideWrite
from trustrank.ranking.services.store import _store, rewrites_rows
from trustrank.ranking.services.store_again import store_again_from_columns
from trustrank.ranking.services.store_columns import place_ids, store_first_from_columns
from trustrank.ranking.services.store_compare import decision_changed
from trustrank.ranking.services.store_groups import search_groups_mend
from trustrank.ranking.services.store_moved import ready_for_moves
from trustrank.ranking.services.store_rows import Ids, QueueRows
from trustrank.ranking.services.store_services import services_store
from trustrank.ranking.services.store_table import TeamTable
from trustrank.risk.buffers import BUFFERS
from trustrank.risk.collector import collector_paused
from trustrank.risk.engine import rank
from trustrank.risk.incremental import RescoreTooLarge, rank_incremental
from trustrank.risk.results import RankResult

log = logging.getLogger(__name__)


@dataclass
class _Cached:
    """What a worker keeps of a team's last run so the next one can be incremental: the
    inputs, the engine's result and the stored rows (finding id -> rank row)."""

    run_id: int
    gathered: Gathered
    result: RankResult
    rows: QueueRows
    gathered_at: datetime
    # The run's results digest, which the next run updates by the rows it changes.
    results_digest: str = ""
    # The digest its per-service results were stored under.
    services_digest: str = ""
    # The triage policy every stored due date was computed under (the next run recomputes
    # only the findings whose decision it changed while the policy stays this one).
    policy: PolicyDays | None = None


# The previous run per team, kept by the worker process that made it. Bounded: a worker
# serving many teams keeps the latest few. A cache older than _CACHE_MAX_AGE is not used:
# a full run now and then also catches what no timestamp records (a deleted project).
_PREVIOUS: OrderedDict[int, _Cached] = OrderedDict()


_PREVIOUS_MAX = 4


_CACHE_MAX_AGE = timedelta(hours=1)


class RankingError(RuntimeError):
    pass


def _phase(run: RankingRun, phase: str, progress: Any = None) -> None:
    run.phase = phase
    RankingRun.objects.filter(pk=run.pk).update(phase=phase)
    if progress is not None:
        progress(phase=phase)


def ranking_run_handle(*, job: RankingRun, progress: Any) -> None:
    """The job runner's handler for the kind "ranking_run". The run marks itself done in
    the transaction that stores its queue (so ranks and run agree); a crash before that
    commit leaves the run to the sweep, and the next attempt ranks again from the start.
    One run of a team at a time on any number of workers: side by side, two would both
    adjust the bucket counts (`positions`) from one earlier queue's keys."""
    waiting = "waiting for the team's running run"
    with advisory_lock_wait(f"ranking-run:{job.team_id}",
                            on_wait=lambda: _phase(job, waiting, progress)):
        _phase(job, "gathering", progress)
        with collector_paused(), _run_settings():
            _execute(job, progress)


def ranking_run_execute(*, run_id: int) -> str:
    """Run one ranking run now, in this process (commands, benches, tests)."""
    from trustrank.jobs.runner import job_run

    return job_run(kind_name="ranking_run", job_id=str(run_id))


@contextmanager
def _run_settings() -> Iterator[None]:
    """The run's session setting, reset after it: `synchronous_commit = off`, a run's
    commits (its phases, its queue) do not wait for the WAL to reach the disk. What a run
    stores is derived from evidence that is kept: a crash can lose at most the last moments
    of a run's writes, never corrupt them, and the next run makes them again; the wait was
    a tenth of a second and more on a busy disk (an incremental run's whole budget is two
    seconds). Every session runs without JIT (trustrank/settings)."""
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET synchronous_commit")


def _places_in(cached: _Cached) -> Callable[[str], int | None]:
    """A finding id's place in the cached result's queue: its rank less one in the rows the
    run kept in memory (every rank as of that run; the table's go stale)."""
    rows, ids = cached.rows, cached.gathered.finding_ids

    def place_of(fid: str) -> int | None:
        at = rows.place(ids.get(fid, 0))
        return None if at is None else int(rows.rank[at]) - 1

    return place_of


def _execute(run: RankingRun, progress: Any = None) -> None:
    """Rank the team's findings and store the queue. On any failure the worker forgets
    the team's previous run, so the next run is a full one over what is stored: nothing of
    a failed run is committed but its phase and the first-run due dates (which the next
    run checks again), while what it held in memory may be half made (the engine extends
    the kept queue index; the gather read against the kept inputs)."""
    threads: list[DueInserter | SideWrite[str]] = []
    try:
        try:
            _rank_and_store(run, threads, progress)
            return
        except RescoreTooLarge as too_large:
            # Left before ranking afresh, the traceback dropped: it holds the incremental
            # attempt's frames (its inputs, the kept queue's records) in a cycle through
            # contextlib's frames, which the paused collector would keep through the run.
            afresh = too_large.count
            too_large.__traceback__ = None
        # What the worker kept of the team goes before the full run gathers, so the two
        # queues are never held at once (the attempt stored nothing).
        _PREVIOUS.pop(run.team_id, None)
        _phase(run, "gathering", progress)
        _rank_and_store(run, threads, progress, afresh=afresh)
    except BaseException:
        _PREVIOUS.pop(run.team_id, None)
        for thread in threads:
            # Its connection must not go on writing due dates beside the next run.
            thread.wait()
        raise


def _rank_and_store(run: RankingRun, threads: list[DueInserter | SideWrite[str]],
                    progress: Any = None, afresh: int | None = None) -> None:
    """`_execute`'s work; a thread it starts on a connection of its own goes into
    `threads`. An incremental run that would rescore more than its limit raises
    `RescoreTooLarge` before it stores anything; `afresh` is then that count, for the full
    run that follows (kept in the run's counts as `rescore_past_limit`)."""
    t0 = time.perf_counter()
    rs = rank_settings()
    # Only its id: the row also holds the weights and counts.
    previous = RankingRun.objects.filter(
        team_id=run.team_id, status=RunStatus.DONE
    ).order_by("-finished_at", "-pk").only("pk", "started_at", "created_at").first()
    cached = _PREVIOUS.get(run.team_id)
    gathered_at = timezone.now()
    incremental = (
        cached is not None and previous is not None and cached.run_id == previous.pk
        and cached.result.settings_version == rs.version
        and gathered_at - cached.gathered_at < _CACHE_MAX_AGE
    )
    if not incremental:
        # A full run reads nothing the worker kept of the team: a queue kept too long, of
        # other settings or of a run another worker followed goes now, not when this run
        # replaces it, so the two queues are never held at once (at a million findings
        # the full run's peak was 1,591 MB beside it, 845 MB alone).
        _PREVIOUS.pop(run.team_id, None)
        cached = None
    if incremental and cached is not None:
        gathered = ranking_inputs_gather(
            team_id=run.team_id, previous=cached.gathered,
            changed_since=cached.gathered_at - CLOCK_SKEW,
        )
    else:
        gathered = ranking_inputs_gather(team_id=run.team_id)
    t1 = time.perf_counter()
    _phase(run, "ranking", progress)
    if incremental and cached is not None:
        versions, services = changed_between(cached.gathered, gathered)
        result = rank_incremental(
            previous=cached.result, inputs=gathered.inputs, settings=rs,
            changed_project_versions=versions, changed_services=services,
            changed_findings=gathered.touched, changed_records=gathered.delta,
            previous_places=_places_in(cached),
            rescore_above=max(settings.TRUSTRANK_RANKING_RESCORE_ABOVE,
                              len(cached.result.findings) // 4),
        )
        if rewrites_rows(result.changed_places, len(result.findings)):
            # The store reads nothing of the previous queue: its ranked findings the new one
            # renumbered go now, not after the run (a failed run forgets it anyway).
            _PREVIOUS.pop(run.team_id, None)
            cached = replace(cached, result=replace(cached.result, findings=()))
    else:
        # A full run's peak is the process's highest: no arrays wait beside it.
        BUFFERS.clear()
        # The inputs digest and the queue's index are made later, while PostgreSQL
        # stores the queue (`_Meanwhile`).
        result = rank(inputs=gathered.inputs, settings=rs, with_digest=False,
                      with_index=False)
    t2 = time.perf_counter()
    _phase(run, "storing", progress)
    # A team's first run: the due dates of findings that have none go in beside the queue,
    # on a connection of their own (see due.DueInserter).
    # A full run's queue comes with columns: its first store is made from them.
    fid = (place_ids(result, gathered.finding_ids)
           if not incremental and result.columns is not None else None)
    early = None if incremental else DueInserter.start(run.team_id, gathered, result, fid=fid)
    if early is not None:
        threads.append(early)
    meanwhile = None if incremental else _Meanwhile(gathered.inputs.findings, result.findings)
    # A full run's per-service results: megabytes of JSON at a hundred thousand services,
    # stored beside a large queue on a connection of their own (`side.SideWrite`).
    services_aside = SideWrite("ranking-services", partial(services_store, result)) if (
        not incremental
        and len(result.findings) >= settings.TRUSTRANK_RANKING_SIDE_WRITES_ABOVE) else None
    if services_aside is not None:
        threads.append(services_aside)
    # Where a rewritten large queue goes until the run's last statement swaps it in.
    team_table = TeamTable(run.team_id, run.pk)
    with transaction.atomic():
        # A full run's queue from its columns: the team's first, else over the stored one.
        by_columns: dict[str, Any] = {
            "run": run, "result": result, "gathered": gathered, "row_hashes": _row_hashes,
            "fid": fid, "meanwhile": meanwhile.step if meanwhile is not None else None,
            "team_table": team_table,
        }
        stored = (store_first_from_columns(**by_columns)
                  or store_again_from_columns(**by_columns)) if fid is not None else None
        counts, rows, (changed, gone), rows_hash = stored or _store(
            run=run, result=result, gathered=gathered,
            before=cached.rows if incremental and cached is not None else None,
            previous=cached.result if incremental and cached is not None else None,
            previous_ids=cached.gathered.finding_ids
            if incremental and cached is not None else None,
            row_hashes=_row_hashes, team_table=team_table,
        )
        counts["search_groups_set"] = search_groups_mend(
            team_id=run.team_id, table=team_table.ranked, since=None if previous is None
            else (previous.started_at or previous.created_at) - CLOCK_SKEW)
        if meanwhile is not None:
            result = meanwhile.finish(result, inputs=gathered.inputs, settings=rs)
        t3 = time.perf_counter()
        if rows_hash is not None:
            # `_rows_digest(rows)`, hashed by the store while PostgreSQL took the rows (a
            # run that rewrote the whole queue would otherwise hash each row twice more).
            digest = f"{rows_hash % _MODULUS:064x}"
        elif incremental and cached is not None and cached.results_digest:
            digest = _rows_digest_update(cached.results_digest, before=cached.rows,
                                         rows=rows, changed=changed, gone=gone)
        else:
            digest = _rows_digest(rows)
        services_digest = services_aside.result() if services_aside is not None else (
            services_store(
                result, previous=cached.result if incremental and cached is not None
                else None,
                previous_digest=cached.services_digest if incremental and cached is not None
                else "",
            ))
        t4 = time.perf_counter()
        if progress is not None:
            # Not `_phase`: the row is written by the heartbeat's own connection, so this
            # transaction takes no lock on it that the heartbeat would wait behind.
            progress(phase="due dates")
        # Due dates follow the decisions just stored (one set-based upsert of FindingDue,
        # a row per finding on a team's first run; the findings themselves are not written).
        written_after = _written_since(run.team_id, gathered_at - CLOCK_SKEW)
        if incremental and cached is not None:
            unsettled = _decided_anew(gathered, cached, rows, changed, written_after)
        else:
            unsettled = due_dates_unsettled(gathered, rows, written_after,
                                            inserted=early is not None)
        # What the due dates below are computed under (they read it again: should it
        # change in between, the next run finds it differs and recomputes every one).
        policy = triage_policy_for(team_id=run.team_id)
        if early is not None:
            unsettled = early.finish(unsettled)
        due_dates_apply(run.team_id, gathered, unsettled, written_after, rows,
                        ranked_table=team_table.ranked)
        t5 = time.perf_counter()
        # Only while this attempt holds the run: an attempt the sweep gave up on must not
        # mark done a run another worker is ranking again.
        finished = RankingRun.objects.filter(
            pk=run.pk, status=RunStatus.RUNNING, attempts=run.attempts
        ).update(
            status=RunStatus.DONE,
            phase="done",
            lease_until=None,
            backend_pid=None,
            error="",
            incremental=incremental,
            previous=previous,
            weights=orjson.loads(orjson.dumps(rs)),
            weights_version=rs.version,
            inputs_digest=result.inputs_digest,
            results_digest=digest,
            services_digest=services_digest,
            counts={
                "findings": len(result.findings),
                "services": len(gathered.inputs.services),
                "edges": len(gathered.inputs.edges),
                "deployments": len(gathered.inputs.deployments),
                **counts,
                **({} if afresh is None else {"rescore_past_limit": afresh}),
            },
            timings={
                "gather_s": round(t1 - t0, 3),
                "rank_s": round(t2 - t1, 3),
                "store_s": round(t3 - t2, 3),
                "digest_s": round(t4 - t3, 3),
                "due_dates_s": round(t5 - t4, 3),
            },
            finished_at=timezone.now(),
        )
        if not finished:
            raise RankingError(f"ranking run {run.pk} was taken over by another attempt")
        if len(changed):  # one row (when a webhook listens), committed with the run; the
            # worker reads the run's decision changes and fans them out (trustrank/notify)
            notify_ranking_run(team_id=run.team_id, run_id=run.pk)
        with connection.cursor() as cur:
            team_table.swap(cur)  # last: its lock is held until the commit
    _PREVIOUS[run.team_id] = _Cached(
        # The due dates just written settled what `settled` said: it is not kept; nor are
        # the queue's columns and moves, which only this run's store reads.
        run_id=run.pk, gathered=replace(gathered, settled=None),
        result=replace(result, columns=None, moves=None), rows=rows,
        gathered_at=gathered_at, results_digest=digest, services_digest=services_digest,
        policy=policy,
    )
    _PREVIOUS.move_to_end(run.team_id)
    while len(_PREVIOUS) > _PREVIOUS_MAX:
        _PREVIOUS.popitem(last=False)
    if not incremental:
        # What the next (incremental) run needs and would otherwise make itself, made
        # now that this run is past its peak (`store_moved.ready_for_moves`); the queue's
        # columns, which nothing reads after this run, go to the pool first.
        if result.columns is not None:
            BUFFERS.give(result.columns.release())
        ready_for_moves(rows)
    if incremental and cached is not None and cached.rows is not rows:
        # The previous run's rows are replaced: their arrays go to the next incremental
        # run's (`risk.buffers`). Its queue index shares its codes with this run's.
        BUFFERS.give(cached.rows.release())


def _decided_anew(
    gathered: Gathered, cached: _Cached, rows: QueueRows, changed: Ids,
    written_after: tuple[int, ...],
) -> dict[str, Any]:
    """An incremental run's due-date work: the previous run settled every ranked
    finding's due date under `cached.policy`, so only the findings whose decision this run
    changed or that are new, those read again (someone wrote them: their due fields may
    have changed) and those written since the gather need recomputing. None of these is
    known without the policy: then every finding is recomputed."""
    if cached.policy is None:
        return {}
    todo = decision_changed(changed, cached.rows, rows)
    ids = gathered.finding_ids
    todo.extend(ids[fid] for fid in gathered.touched or () if fid in ids)
    todo.extend(written_after)
    return {"finding_ids": todo, "checked_policy": cached.policy}


def _written_since(team_id: int, since: datetime) -> tuple[int, ...]:
    """Findings written since `since` (the run's gather), read just before the due dates
    are written (through the (team, updated_at) index: a few rows, unless the team's
    findings were loaded meanwhile)."""
    from trustrank.findings.models import Finding

    return tuple(
        Finding.objects.filter(team_id=team_id, updated_at__gte=since).values_list(
            "pk", flat=True
        )
    )
