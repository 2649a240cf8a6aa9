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
from datetime import timedelta
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

# The previous result per team, kept by the worker process that made it, so the next run
# of that team can be incremental. Bounded: a worker serving many teams keeps the latest.
_PREVIOUS: OrderedDict[int, tuple[int, ri.RankInputs, RankResult]] = OrderedDict()
_PREVIOUS_MAX = 4


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


def ranking_runs_sweep() -> int:
    """Queued runs whose start time passed a while ago (a lost message): enqueue again."""
    from trustrank.ranking.tasks import ranking_run

    stale = timezone.now() - timedelta(seconds=settings.TRUSTRANK_JOB_REQUEUE_SECONDS)
    ids = list(
        RankingRun.objects.filter(status=RunStatus.QUEUED, not_before__lt=stale).values_list(
            "pk", flat=True
        )
    )
    for run_id in ids:
        ranking_run.apply_async(args=[run_id])
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
    gathered = ranking_inputs_gather(team_id=run.team_id)
    t1 = time.perf_counter()
    _phase(run, "ranking")
    rs = rank_settings()
    previous = RankingRun.objects.filter(
        team_id=run.team_id, status=RunStatus.DONE
    ).order_by("-finished_at", "-pk").first()
    cached = _PREVIOUS.get(run.team_id)
    incremental = (
        cached is not None and previous is not None and cached[0] == previous.pk
        and cached[2].settings_version == rs.version
    )
    if incremental and cached is not None:
        versions, services = _changed_since(cached[1], gathered.inputs)
        result = rank_incremental(
            previous=cached[2], inputs=gathered.inputs, settings=rs,
            changed_project_versions=versions, changed_services=services,
        )
    else:
        result = rank(inputs=gathered.inputs, settings=rs)
    t2 = time.perf_counter()
    _phase(run, "storing")
    with transaction.atomic():
        counts = _store(run=run, result=result, gathered=gathered)
        t3 = time.perf_counter()
        RankingRun.objects.filter(pk=run.pk).update(
            status=RunStatus.DONE,
            phase="",
            incremental=incremental,
            previous=previous,
            weights=orjson.loads(orjson.dumps(rs)),
            weights_version=rs.version,
            inputs_digest=result.inputs_digest,
            results_digest=_results_digest(result),
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
    _PREVIOUS[run.team_id] = (run.pk, gathered.inputs, result)
    _PREVIOUS.move_to_end(run.team_id)
    while len(_PREVIOUS) > _PREVIOUS_MAX:
        _PREVIOUS.popitem(last=False)


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


def _results_digest(result: RankResult) -> str:
    from trustrank.risk.results import result_digest

    return result_digest(result)


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


def _store(*, run: RankingRun, result: RankResult, gathered: Gathered) -> dict[str, Any]:
    contexts: dict[tuple[Any, ...], tuple[str, bytes]] = {}
    rows: list[tuple[int, int, int, str, float, str, str]] = []
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
        rows.append(
            (gathered.finding_ids[r.finding_id], r.rank, env_counter[env], env, r.score,
             r.decision, ctx[0])
        )
    by_id = {row[0]: row for row in rows}
    new_context = {ctx[0]: ctx[1] for ctx in contexts.values()}
    with connection.cursor() as cur:
        # Dropped at commit; dropped first too, for a run inside a caller's transaction.
        cur.execute("DROP TABLE IF EXISTS tmp_rank")
        cur.execute(
            "CREATE TEMP TABLE tmp_rank (id bigint PRIMARY KEY, rank int, env_rank int, "
            "env text, score double precision, decision text, ctx text) ON COMMIT DROP"
        )
        with cur.copy("COPY tmp_rank FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cur.execute(
            "INSERT INTO ranking_rankcontext (digest, data, created_at) "
            "SELECT d, c::jsonb, now() FROM unnest(%s::text[], %s::text[]) AS u(d, c) "
            "ON CONFLICT (digest) DO NOTHING",
            [list(new_context), [b.decode() for b in new_context.values()]],
        )
        cur.execute(
            """
            SELECT f.id, f.rank, f.score, f.decision, f.rank_context_id
              FROM tmp_rank t JOIN findings_finding f ON f.id = t.id
             WHERE f.rank IS DISTINCT FROM t.rank OR f.score IS DISTINCT FROM t.score
                OR f.decision IS DISTINCT FROM t.decision
            """
        )
        moved = cur.fetchall()
        old_contexts = _contexts({m[4] for m in moved if m[4] and m[4] not in new_context})
        now = timezone.now()
        with cur.copy(
            "COPY ranking_rankchange (run_id, finding_id, rank, score, decision, previous_rank, "
            "previous_score, previous_decision, why, at) FROM STDIN"
        ) as copy:
            for fid, old_rank, old_score, old_decision, old_ctx in moved:
                new = by_id[fid]
                before = (
                    orjson.loads(new_context[old_ctx]) if old_ctx in new_context
                    else old_contexts.get(old_ctx)
                ) if old_ctx else None
                why = _why(before, orjson.loads(new_context[new[6]]))
                copy.write_row(
                    (run.pk, fid, new[1], new[4], new[5], old_rank, old_score,
                     old_decision or "", orjson.dumps(why).decode(), now)
                )
        cur.execute(
            """
            UPDATE findings_finding f
               SET rank = t.rank, env_rank = t.env_rank, rank_environment = t.env,
                   score = t.score, decision = t.decision, rank_context_id = t.ctx,
                   ranking_run_id = %s
              FROM tmp_rank t
             WHERE f.id = t.id
               AND (f.rank IS DISTINCT FROM t.rank OR f.env_rank IS DISTINCT FROM t.env_rank
                    OR f.rank_environment <> t.env OR f.score IS DISTINCT FROM t.score
                    OR f.decision <> t.decision OR f.rank_context_id IS DISTINCT FROM t.ctx)
            """,
            [run.pk],
        )
        updated = cur.rowcount
        # Findings no longer open (or gone) leave the queue.
        cur.execute(
            """
            UPDATE findings_finding f
               SET rank = NULL, env_rank = NULL, rank_environment = '', score = NULL,
                   decision = '', ranking_run_id = %s
             WHERE f.team_id = %s AND f.rank IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM tmp_rank t WHERE t.id = f.id)
            """,
            [run.pk, run.team_id],
        )
        left = cur.rowcount
    return {
        "by_environment": {env: n for env, n in sorted(env_counter.items())},
        "contexts": len(new_context),
        "moved": len(moved),
        "updated": updated,
        "left_queue": left,
    }


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
