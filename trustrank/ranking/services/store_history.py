"""A run's rank history: RankChange rows for the findings whose own key, score or decision
changed, or that entered or left the queue, with which factors moved (`why`), and the
reading of what moved most. A finding pushed down by others has no line: its rank at any
run follows from the keys (`qkey`, `previous_qkey`) the lines record."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

import orjson
from django.utils import timezone

from trustrank.ranking.inputs.ids import int_array
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.services.store_rows import Ids, QueueRows, Row

_LINES = 20_000


def _history(
    cur: Any,
    *,
    run: RankingRun,
    moved: Ids,
    gone: list[int],
    before: Mapping[int, Row],
    rows: Mapping[int, Row],
    new_context: dict[str, bytes],
    first: bool,
) -> None:
    """RankChange rows: findings whose key, score or decision changed (`moved`), entered
    the queue (after the team's first run: on the first, everything is new and nothing
    moved) or left it (`gone`). Their ranks are counted from the keys as PostgreSQL counts
    them (`trustrank.ranking.ranks`): the previous among the rows before the run's writes
    (`before`), the new among the rows after them (`rows`)."""
    if first:
        return
    before, rows = QueueRows.of(before), QueueRows.of(rows)
    old_ctx = _contexts(before.digests_of(moved) - new_context.keys())
    now = timezone.now()
    parsed: dict[str, Any] = {}
    whys: dict[tuple[str, str], str] = {}

    def ctx(digest: str) -> Any:
        if digest not in parsed:
            parsed[digest] = (
                orjson.loads(new_context[digest]) if digest in new_context
                else old_ctx.get(digest)
            )
        return parsed[digest]

    def why_of(old_digest: str, new_digest: str) -> str:
        # Many moved findings share a pair of contexts: compare each pair once.
        pair = (old_digest, new_digest)
        why = whys.get(pair)
        if why is None:
            why = whys[pair] = orjson.dumps(_why(ctx(old_digest), ctx(new_digest))).decode()
        return why

    if gone:
        # A ranked row may outlive its finding (the table has no foreign key: a finding
        # deleted while a run stored its rank); its history went with the finding.
        cur.execute(
            "SELECT id FROM findings_finding WHERE id = ANY(%s::bigint[])", [int_array(gone)]
        )
        existing = {row[0] for row in cur.fetchall()}
        gone = [fid for fid in gone if fid in existing]
    # COPY's text formatted here, as for the ranks: the driver's row path costs a call per
    # value. Decisions are fixed words and `why` is JSON (orjson escapes every control
    # character), so only the backslashes of the JSON need doubling.
    at = now.isoformat()
    whys_text: dict[str, str] = {}

    def text(why: str) -> str:
        t = whys_text.get(why)
        if t is None:
            t = whys_text[why] = why.replace("\\", "\\\\")
        return t

    def lines() -> Iterator[str]:
        for start in range(0, len(moved), _LINES):
            part = moved[start : start + _LINES]
            olds = dict(before.items_of(part))
            old_rank = dict(zip(map(int, part), before.key_ranks(part).tolist(), strict=True))
            old_key = dict(before.own_items(part))
            ranks = rows.key_ranks(part).tolist()
            yield from (line(fid, new, olds.get(fid), rank, own[0], old_rank[fid],
                             old_key.get(fid))
                        for (fid, new), rank, (_f, own) in zip(
                            rows.items_of(part), ranks, rows.own_items(part), strict=True))
        for (fid, old), rank, (_f, own) in zip(before.items_of(gone), before.key_ranks(gone)
                                               .tolist(), before.own_items(gone), strict=True):
            yield (f"{run.pk}\t{fid}\t\\N\t\\N\t\t{rank}\t{old[3]!r}\t{old[4]}\t[]\t{at}"
                   f"\t\\N\t{own[0]}\n")

    def line(fid: int, new: Row, old: Row | None, rank: int, qkey: int, old_rank: int,
             old_own: tuple[Any, ...] | None) -> str:
        if old is None or old_own is None:
            return (f"{run.pk}\t{fid}\t{rank}\t{new[3]!r}\t{new[4]}\t\\N\t\\N\t\t[]\t{at}"
                    f"\t{qkey}\t\\N\n")
        return (f"{run.pk}\t{fid}\t{rank}\t{new[3]!r}\t{new[4]}\t{old_rank}\t"
                f"{old[3]!r}\t{old[4]}\t{text(why_of(old[5], new[5]))}\t{at}\t{qkey}\t"
                f"{old_own[0]}\n")

    # Formatted and sent 20,000 lines at a time (a run that rewrote a million keys would
    # hold every line, 140 MB a million, until the last was made).
    with cur.copy(
        "COPY ranking_rankchange (run_id, finding_id, rank, score, decision, previous_rank, "
        "previous_score, previous_decision, why, at, qkey, previous_qkey) FROM STDIN"
    ) as copy:
        made = lines()
        while part := "".join(islice(made, _LINES)):
            copy.write(part)


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
