"""A run's rank history: RankChange rows for the findings whose own key, score or decision
changed, or that entered or left the queue, with which factors moved (`why`), and the
reading of what moved most. A finding pushed down by others has no line: its rank at any
run follows from the keys (`qkey`, `previous_qkey`) the lines record."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any

import numpy as np
import orjson
from django.utils import timezone

from trustrank.ranking.inputs.ids import int_array
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.services.store_rows import Ids, QueueRows, Row
from trustrank.risk.inputs import DECISIONS

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
            yield from _moved_lines(np.asarray(moved[start : start + _LINES], dtype=np.int64),
                                    rows, before, head=f"{run.pk}\t", at=at, why=why_text)
        for (fid, old), rank, (_f, own) in zip(before.items_of(gone), before.key_ranks(gone)
                                               .tolist(), before.own_items(gone), strict=True):
            yield (f"{run.pk}\t{fid}\t\\N\t\\N\t\t{rank}\t{old[3]!r}\t{old[4]}\t[]\t{at}"
                   f"\t\\N\t{own[0]}\n")

    def why_text(old_digest: str, new_digest: str) -> str:
        return text(why_of(old_digest, new_digest))

    # Formatted and sent 20,000 lines at a time (a run that rewrote a million keys would
    # hold every line, 140 MB a million, until the last was made).
    with cur.copy(
        "COPY ranking_rankchange (run_id, finding_id, rank, score, decision, previous_rank, "
        "previous_score, previous_decision, why, at, qkey, previous_qkey) FROM STDIN"
    ) as copy:
        made = lines()
        while part := "".join(islice(made, _LINES)):
            copy.write(part)


def _moved_lines(part: np.ndarray[Any, Any], rows: QueueRows, before: QueueRows, *,
                 head: str, at: str, why: Callable[[str, str], str]) -> Iterator[str]:
    """The COPY lines of the moved findings `part` (each has a row in `rows`), made column
    by column: each value's text by a pass in C, each line by a join (a line formatted per
    finding was most of a run's history, ten million lines when every key changed)."""
    now, was = rows.places(part), before.places(part)
    found = was >= 0
    old = np.maximum(was, 0)

    def previous(col: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        # Only the found ones are read; `before` may have no row at all (a full run keeps
        # the stored rows of the changed findings only: here, every one new to the queue).
        return col[old] if len(col) else np.zeros(len(part), dtype=col.dtype)

    # The why of each (old, new) context pair, once per distinct pair; -1: new to the queue.
    width = max(len(rows.digests), 1)
    pair = np.where(found, previous(before.context).astype(np.int64) * width + rows.context[now],
                    -1)
    pairs, code = np.unique(pair, return_inverse=True)
    whys = [why(before.digests[p // width], rows.digests[p % width]) if p >= 0 else "[]"
            for p in pairs.tolist()]
    n = len(part)
    cols: list[list[str]] = [
        list(map(str, part.tolist())),
        list(map(str, rows.key_ranks(part).tolist())),
        list(map(repr, rows.score[now].tolist())),
        list(map(DECISIONS.__getitem__, rows.decision[now].tolist())),
        list(map(str, before.key_ranks(part).tolist())),
        list(map(repr, previous(before.score).tolist())),
        list(map(DECISIONS.__getitem__, previous(before.decision).tolist())),
        list(map(whys.__getitem__, code.reshape(-1).tolist())),
        [at] * n,
        list(map(str, rows.qkey[now].tolist())),
        list(map(str, previous(before.qkey).tolist())),
    ]
    for i in np.flatnonzero(~found).tolist():
        # New to the queue: nothing before.
        cols[4][i] = cols[5][i] = cols[10][i] = "\\N"
        cols[6][i] = ""
    return map(f"{head}{{}}\n".format, map("\t".join, zip(*cols, strict=True)))


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
