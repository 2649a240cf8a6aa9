"""Ranking runs: request (debounced), execute, store, and report what moved.

A run is a row (RankingRun) claimed with a conditional UPDATE, so a message delivered twice
runs it once. Execution gathers the team's inputs, ranks them with the pure engine
(incrementally when this process still holds the previous run's result), then writes in one
transaction: the distinct rank contexts, a RankChange per finding whose rank, score or
decision moved, and the new rank columns on the findings that changed (set-based, through a
temporary table filled with COPY).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from trustrank.ranking.inputs import Gathered, rank_settings, ranking_inputs_gather
from trustrank.ranking.models import RankChange, RankingRun, RunStatus
from trustrank.risk import inputs as ri
from trustrank.risk.engine import rank, rank_incremental
from trustrank.risk.results import RankedFinding, RankResult, factor_json

log = logging.getLogger(__name__)

@dataclass
class _Cached:
    """What a worker keeps of a team's last run so the next one can be incremental: the
    inputs, the engine's result and the stored rows (finding id -> rank row)."""

    run_id: int
    gathered: Gathered
    result: RankResult
    rows: dict[int, tuple[int, int, str, float, str, str]]
    gathered_at: datetime


# The previous run per team, kept by the worker process that made it. Bounded: a worker
# serving many teams keeps the latest few. A cache older than _CACHE_MAX_AGE is not used:
# a full run now and then also catches what no timestamp records (a deleted project).
_PREVIOUS: OrderedDict[int, _Cached] = OrderedDict()
_PREVIOUS_MAX = 4
_CACHE_MAX_AGE = timedelta(hours=1)
# Writes committed just before a gather began may carry an earlier updated_at.
_CLOCK_SKEW = timedelta(seconds=30)


class RankingError(RuntimeError):
    pass


# --- requesting ---------------------------------------------------------------------------


def ranking_run_request(
    *, team_id: int, trigger: str, requested_by: str = "system", delay_seconds: int | None = None
) -> RankingRun:
    """A queued run for the team: the one already waiting (loads in quick succession share
    it), or a new one that starts after the debounce delay. Enqueued on commit."""
    from trustrank.ranking.tasks import ranking_run

    delay = settings.TRUSTRANK_RANKING_DEBOUNCE_SECONDS if delay_seconds is None else delay_seconds
    with transaction.atomic():
        # One queued run per team: serialise requests of one team on an advisory lock.
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"ranking:{team_id}"]
            )
        run = RankingRun.objects.filter(team_id=team_id, status=RunStatus.QUEUED).first()
        if run is not None:
            if delay == 0 and run.not_before > timezone.now():
                run.not_before = timezone.now()
                run.save(update_fields=["not_before"])
                waiting_id = run.pk
                transaction.on_commit(lambda: ranking_run.apply_async(args=[waiting_id]))
            return run
        run = RankingRun.objects.create(
            team_id=team_id,
            trigger=trigger[:64],
            requested_by=requested_by[:160],
            not_before=timezone.now() + timedelta(seconds=delay),
        )
        run_id = run.pk
        transaction.on_commit(
            lambda: ranking_run.apply_async(args=[run_id], countdown=max(0, delay))
        )
    return run


def ranking_after_load(*, team_id: int, what: str) -> None:
    """Evidence changed: rank again after the debounce delay (never fails the load)."""
    try:
        ranking_run_request(team_id=team_id, trigger=f"after {what}")
    except Exception:  # a load must not fail because ranking could not be scheduled
        log.exception("could not schedule a ranking run for team %s", team_id)


def ranking_after_feed(*, what: str) -> None:
    """Feeds are shared: every team with open vulnerability findings ranks again."""
    from trustrank.findings.models import OPEN_STATES, Finding

    team_ids = (
        Finding.objects.filter(kind="vulnerability", state__in=OPEN_STATES)
        .values_list("team_id", flat=True)
        .distinct()
    )
    for team_id in sorted(set(team_ids)):
        ranking_after_load(team_id=team_id, what=what)


# A run still "running" this long after it started lost its worker: it is queued again.
_RUN_LEASE = timedelta(hours=1)


def ranking_runs_sweep() -> int:
    """Beat: re-queue runs whose worker died, re-send lost messages, and rank again every
    team with open findings whose last run is older than the sweep interval (certificates
    expire and telemetry leaves the window while nothing is uploaded)."""
    from trustrank.findings.models import OPEN_STATES, Finding
    from trustrank.ranking.tasks import ranking_run

    now = timezone.now()
    RankingRun.objects.filter(status=RunStatus.RUNNING, started_at__lt=now - _RUN_LEASE).update(
        status=RunStatus.QUEUED, not_before=now, phase=""
    )
    stale = now - timedelta(seconds=settings.TRUSTRANK_JOB_REQUEUE_SECONDS)
    ids = list(
        RankingRun.objects.filter(status=RunStatus.QUEUED, not_before__lt=stale).values_list(
            "pk", flat=True
        )
    )
    for run_id in ids:
        ranking_run.apply_async(args=[run_id])
    due = now - timedelta(seconds=settings.TRUSTRANK_RANKING_SWEEP_SECONDS)
    recent = set(
        RankingRun.objects.filter(created_at__gte=due).values_list("team_id", flat=True)
    )
    teams = set(
        Finding.objects.filter(state__in=OPEN_STATES).values_list("team_id", flat=True).distinct()
    )
    for team_id in sorted(teams - recent):
        ranking_after_load(team_id=team_id, what="periodic re-rank")
    return len(ids)


# --- executing ----------------------------------------------------------------------------


def _claim(run_id: int) -> bool:
    now = timezone.now()
    claimed = RankingRun.objects.filter(
        pk=run_id, status=RunStatus.QUEUED, not_before__lte=now
    ).update(status=RunStatus.RUNNING, started_at=now, phase="gathering")
    return claimed == 1


def _phase(run: RankingRun, phase: str) -> None:
    run.phase = phase
    RankingRun.objects.filter(pk=run.pk).update(phase=phase)


def ranking_run_execute(*, run_id: int) -> str:
    run = RankingRun.objects.filter(pk=run_id).first()
    if run is None:
        return "missing"
    if run.status == RunStatus.QUEUED and run.not_before > timezone.now():
        from trustrank.ranking.tasks import ranking_run

        wait = (run.not_before - timezone.now()).total_seconds()
        ranking_run.apply_async(args=[run_id], countdown=max(1, int(wait) + 1))
        return "waiting"
    if not _claim(run_id):
        return "claimed elsewhere"
    run.refresh_from_db()
    try:
        _execute(run)
    except Exception as exc:
        log.exception("ranking run %s failed", run_id)
        RankingRun.objects.filter(pk=run_id).update(
            status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
            finished_at=timezone.now(),
        )
        return RunStatus.FAILED
    return RunStatus.DONE


def _changed_since(old: ri.RankInputs, new: ri.RankInputs) -> tuple[set[str], set[tuple[str, str]]]:
    """Project versions whose components or deployments changed, and services whose
    library evidence or deployment changed, between two input sets."""

    def by_version(inputs: ri.RankInputs) -> dict[str, set[Any]]:
        out: dict[str, set[Any]] = {}
        for c in inputs.components:
            out.setdefault(c.project_version, set()).add(c)
        for d in inputs.deployments:
            out.setdefault(d.project_version, set()).add(d)
        for p in inputs.project_versions:
            out.setdefault(p.key, set()).add(p)
        return out

    a, b = by_version(old), by_version(new)
    versions = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    libs_a = {(x.environment, x.service): x for x in old.libraries}
    libs_b = {(x.environment, x.service): x for x in new.libraries}
    services = {k for k in libs_a.keys() | libs_b.keys() if libs_a.get(k) != libs_b.get(k)}
    deps_a = {(d.environment, d.service, d.project_version, d.human_impact)
              for d in old.deployments}
    deps_b = {(d.environment, d.service, d.project_version, d.human_impact)
              for d in new.deployments}
    services |= {(d[0], d[1]) for d in deps_a ^ deps_b}
    return versions, services


def _execute(run: RankingRun) -> None:
    t0 = time.perf_counter()
    rs = rank_settings()
    previous = RankingRun.objects.filter(
        team_id=run.team_id, status=RunStatus.DONE
    ).order_by("-finished_at", "-pk").first()
    cached = _PREVIOUS.get(run.team_id)
    gathered_at = timezone.now()
    incremental = (
        cached is not None and previous is not None and cached.run_id == previous.pk
        and cached.result.settings_version == rs.version
        and gathered_at - cached.gathered_at < _CACHE_MAX_AGE
    )
    if incremental and cached is not None:
        gathered = ranking_inputs_gather(
            team_id=run.team_id, previous=cached.gathered,
            changed_since=cached.gathered_at - _CLOCK_SKEW,
        )
    else:
        gathered = ranking_inputs_gather(team_id=run.team_id)
    t1 = time.perf_counter()
    _phase(run, "ranking")
    if incremental and cached is not None:
        versions, services = _changed_since(cached.gathered.inputs, gathered.inputs)
        result = rank_incremental(
            previous=cached.result, inputs=gathered.inputs, settings=rs,
            changed_project_versions=versions, changed_services=services,
        )
    else:
        result = rank(inputs=gathered.inputs, settings=rs)
    t2 = time.perf_counter()
    _phase(run, "storing")
    with transaction.atomic():
        counts, rows = _store(
            run=run, result=result, gathered=gathered,
            before=cached.rows if incremental and cached is not None else None,
        )
        t3 = time.perf_counter()
        RankingRun.objects.filter(pk=run.pk).update(
            status=RunStatus.DONE,
            phase="",
            incremental=incremental,
            previous=previous,
            weights=orjson.loads(orjson.dumps(rs)),
            weights_version=rs.version,
            inputs_digest=result.inputs_digest,
            results_digest=_rows_digest(rows),
            services=services_json(result),
            counts={
                "findings": len(result.findings),
                "services": len(gathered.inputs.services),
                "edges": len(gathered.inputs.edges),
                "deployments": len(gathered.inputs.deployments),
                **counts,
            },
            timings={
                "gather_s": round(t1 - t0, 3),
                "rank_s": round(t2 - t1, 3),
                "store_s": round(t3 - t2, 3),
            },
            finished_at=timezone.now(),
        )
    _PREVIOUS[run.team_id] = _Cached(
        run_id=run.pk, gathered=gathered, result=result, rows=rows, gathered_at=gathered_at
    )
    _PREVIOUS.move_to_end(run.team_id)
    while len(_PREVIOUS) > _PREVIOUS_MAX:
        _PREVIOUS.popitem(last=False)


def _rows_digest(rows: dict[int, tuple[int, int, str, float, str, str]]) -> str:
    """SHA-256 of what the run stored: each finding's rank, score, decision and the digest
    of its context (which covers the explanation). Equal results, equal digest."""
    h = hashlib.sha256()
    for fid in sorted(rows):
        h.update(orjson.dumps([fid, *rows[fid]]))
    return h.hexdigest()


def services_json(result: RankResult) -> dict[str, dict[str, Any]]:
    """The per-service graph results by environment and name, as the run stores them."""
    out: dict[str, dict[str, Any]] = {}
    for s in result.services:
        out.setdefault(s.environment, {})[s.name] = {
            "trust": s.trust,
            "identity_trust": s.identity_trust,
            "exposure": s.exposure,
            "exposure_reason": s.exposure_reason,
            "path": list(s.path),
            "hops": orjson.loads(orjson.dumps(list(s.hops))),
        }
    return out


# --- storing ------------------------------------------------------------------------------


def context_of(r: RankedFinding) -> dict[str, Any]:
    return {
        "deployed": r.deployed,
        "environment": r.environment,
        "service": r.service,
        "project_version": r.project_version,
        "exposure": r.exposure,
        "reachability": r.reachability,
        "exploitation": r.exploitation,
        "automatable": r.automatable,
        "human_impact": r.human_impact,
        "trust": r.trust,
        "path": list(r.path),
        "explanation": [factor_json(f) for f in r.explanation],
    }


# Above this many changed ranks a run rewrites the team's queue whole (delete + COPY) rather
# than row by row.
_REWRITE_ABOVE = 20_000


def _store(
    *,
    run: RankingRun,
    result: RankResult,
    gathered: Gathered,
    before: dict[int, tuple[int, int, str, float, str, str]] | None = None,
) -> tuple[dict[str, Any], dict[int, tuple[int, int, str, float, str, str]]]:
    """Write the run's ranks; `before` is the stored queue when the caller knows it (an
    incremental run), else it is read. Returns the counts and the rows now stored."""
    contexts: dict[tuple[Any, ...], tuple[str, bytes]] = {}
    rows: dict[int, tuple[int, int, str, float, str, str]] = {}
    env_counter: dict[str, int] = {}
    for r in result.findings:
        key = (r.deployed, r.environment, r.service, r.project_version, r.exposure,
               r.reachability, r.exploitation, r.automatable, r.human_impact, r.trust, r.path,
               r.explanation)
        ctx = contexts.get(key)
        if ctx is None:
            body = orjson.dumps(context_of(r), option=orjson.OPT_SORT_KEYS)
            ctx = contexts[key] = (hashlib.sha256(body).hexdigest(), body)
        env = r.environment if r.deployed else ""
        env_counter[env] = env_counter.get(env, 0) + 1
        rows[gathered.finding_ids[r.finding_id]] = (
            r.rank, env_counter[env], env, r.score, r.decision, ctx[0]
        )
    new_context = {ctx[0]: ctx[1] for ctx in contexts.values()}
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO ranking_rankcontext (digest, data, created_at) "
            "SELECT d, c::jsonb, now() FROM unnest(%s::text[], %s::text[]) AS u(d, c) "
            "ON CONFLICT (digest) DO NOTHING",
            [list(new_context), [b.decode() for b in new_context.values()]],
        )
        if before is None:
            cur.execute(
                "SELECT finding_id, rank, env_rank, environment, score, decision, context_id "
                "FROM ranking_rankedfinding WHERE team_id = %s",
                [run.team_id],
            )
            before = {row[0]: row[1:] for row in cur.fetchall()}
        changed = [fid for fid, row in rows.items() if before.get(fid) != row]
        gone = [fid for fid in before if fid not in rows]
        moved = [
            fid for fid in changed
            if fid not in before or before[fid][0] != rows[fid][0]
            or before[fid][3] != rows[fid][3] or before[fid][4] != rows[fid][4]
        ]
        _history(cur, run=run, moved=moved, gone=gone, before=before, rows=rows,
                 new_context=new_context, first=not before)
        rewrite = len(changed) + len(gone) > _REWRITE_ABOVE
        if rewrite:
            cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [run.team_id])
            targets = list(rows)
        else:
            if gone:
                cur.execute(
                    "DELETE FROM ranking_rankedfinding WHERE finding_id = ANY(%s)", [gone]
                )
            if changed:
                cur.execute(
                    "DELETE FROM ranking_rankedfinding WHERE finding_id = ANY(%s)", [changed]
                )
            targets = changed
        with cur.copy(
            "COPY ranking_rankedfinding (finding_id, team_id, run_id, rank, env_rank, "
            "environment, score, decision, context_id) FROM STDIN"
        ) as copy:
            for fid in targets:
                rank_, env_rank, env, score, decision, ctx_id = rows[fid]
                copy.write_row(
                    (fid, run.team_id, run.pk, rank_, env_rank, env, score, decision, ctx_id)
                )
        if rewrite:
            # The planner must know the new queue's size to walk its index for a page.
            cur.execute("ANALYZE ranking_rankedfinding")
    counts = {
        "by_environment": {env: n for env, n in sorted(env_counter.items())},
        "contexts": len(new_context),
        "moved": len(moved),
        "updated": len(changed),
        "left_queue": len(gone),
    }
    return counts, rows


def _history(
    cur: Any,
    *,
    run: RankingRun,
    moved: list[int],
    gone: list[int],
    before: dict[int, tuple[Any, ...]],
    rows: dict[int, tuple[int, int, str, float, str, str]],
    new_context: dict[str, bytes],
    first: bool,
) -> None:
    """RankChange rows: findings whose rank, score or decision moved, entered the queue
    (after the team's first run: on the first, everything is new and nothing moved) or
    left it."""
    if first:
        return
    old_ctx = _contexts({before[f][5] for f in moved if f in before} - new_context.keys())
    now = timezone.now()

    def ctx(digest: str) -> Any:
        return orjson.loads(new_context[digest]) if digest in new_context else old_ctx.get(digest)

    with cur.copy(
        "COPY ranking_rankchange (run_id, finding_id, rank, score, decision, previous_rank, "
        "previous_score, previous_decision, why, at) FROM STDIN"
    ) as copy:
        for fid in moved:
            new = rows[fid]
            old = before.get(fid)
            why = _why(ctx(old[5]), ctx(new[5])) if old else []
            copy.write_row(
                (run.pk, fid, new[0], new[3], new[4], old[0] if old else None,
                 old[3] if old else None, old[4] if old else "", orjson.dumps(why).decode(),
                 now)
            )
        for fid in gone:
            old = before[fid]
            copy.write_row((run.pk, fid, None, None, "", old[0], old[3], old[4], "[]", now))


def _contexts(digests: set[str]) -> dict[str, Any]:
    from trustrank.ranking.models import RankContext

    return dict(RankContext.objects.filter(digest__in=digests).values_list("digest", "data"))


def _why(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The factors whose value or effect changed, largest effect change first."""
    if not before or not after:
        return []
    a = {f["name"]: f for f in before.get("explanation", [])}
    b = {f["name"]: f for f in after.get("explanation", [])}
    out = []
    for name in sorted(a.keys() | b.keys()):
        x, y = a.get(name), b.get(name)
        if x and y and x["value"] == y["value"] and x["effect"] == y["effect"]:
            continue
        out.append({
            "factor": name,
            "before": x["value"] if x else None,
            "after": y["value"] if y else None,
            "effect_change": round((y["effect"] if y else 0.0) - (x["effect"] if x else 0.0), 4),
        })
    out.sort(key=lambda c: (-abs(c["effect_change"]), c["factor"]))
    return out


# --- reading ------------------------------------------------------------------------------


def ranking_changes(*, run: RankingRun, limit: int = 50) -> list[RankChange]:
    """What moved most in this run: `moved` is positive when a finding rose; a finding new
    to the queue (or leaving it) counts as moving from (or to) its end."""
    from django.db.models import F, IntegerField, Value
    from django.db.models.functions import Abs, Coalesce

    span = int((run.counts or {}).get("findings", 0)) + 1
    moved = Coalesce(F("previous_rank"), Value(span), output_field=IntegerField()) - Coalesce(
        F("rank"), Value(span), output_field=IntegerField()
    )
    return list(
        RankChange.objects.filter(run=run)
        .annotate(moved=moved, distance=Abs(moved))
        .select_related("finding")
        .order_by("-distance", "finding_id")[:limit]
    )
