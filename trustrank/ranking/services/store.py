"""Storing a run's ranks: the rank contexts, the RankChange history with its reasons,
the new rank columns on the findings, and reading back what moved."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from django.db import connection
from django.utils import timezone

from trustrank.ranking.inputs import Gathered
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.risk.results import RankedFinding, RankResult, factor_json


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
_REWRITE_ABOVE = 250_000


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

