"""The queue key: what orders the queue, as a tuple (`queue_key_for`, the engine's) and as
one integer (`queue_key`, `queue_keys`, `queue_key_of`) that the database orders by.

Queue order is: decision (immediate first), deployed before deployed nowhere, SSVC level
(highest first), score (highest first), then the finding id, shorter first and equal
lengths in string order (`id_key`). For database ids (decimal digits, no leading zero)
that is numeric order, so the queue is exactly `ORDER BY qkey, finding_id` over the
integer key and the numeric id; for any other ids it is still one total order.

The integer packs the four parts before the id, each in a range `queue_key` checks:
decision order (0 immediate … 3 defer) × 2 + deployed nowhere, × 16 + (15 − level),
× 1,000,001 + (1,000,000 − score × 10,000). Scores are 0–100 rounded to 4 decimals by the
engine (`engine._Scorer`), so the last part is exact; a score off that grid is rounded to
it here, and two scores closer than 0.0001 would share a key: `queue.assemble` checks the
keys against the order it sorted, so a scoring change that broke this fails a run instead
of storing a queue in another order than the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trustrank.risk.inputs import DECISIONS, EXPOSURES, HUMAN_IMPACTS, RankSettings
from trustrank.risk.results import RankedFinding
from trustrank.risk.scoring import EXPLOITATION_INDEX

# (−decision index, deployed nowhere, −SSVC level, −score, id length, finding id):
# ascending order is queue order.
Key = tuple[int, bool, int, float, int, str]

_URGENT = len(DECISIONS) - 1  # the index of the most urgent decision (immediate)
_LEVELS = 16  # SSVC levels 0-15 fit (0-8 are used)
_STEPS = 1_000_000  # a score of 0-100 in steps of 0.0001
_DECISION_INDEX = {d: i for i, d in enumerate(DECISIONS)}


def id_key(finding_id: str) -> tuple[int, str]:
    """A finding id's place in the order: shorter ids first, then string order (numeric
    order for decimal ids without leading zeros)."""
    return len(finding_id), finding_id


def id_places(ids: Sequence[str]) -> np.ndarray[Any, Any]:
    """Each id's place (0 …) among `ids` in `id_key` order (the ids are distinct)."""
    n = len(ids)
    # Python's string order, then a stable sort of that order by length: numpy's own
    # string order drops trailing NUL characters, and sorting Python tuples
    # (`key=id_key`) took four times as long (5.4 s against 1.3 s for 10M database ids).
    by_string = np.array(sorted(range(n), key=ids.__getitem__), dtype=np.int64)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=n)
    if n and lengths.max() < 1 << 15:
        lengths = lengths.astype(np.int16)  # numpy sorts 16-bit integers by radix
    order = by_string[np.argsort(lengths[by_string], kind="stable")]
    places = np.empty(n, dtype=np.int64)
    places[order] = np.arange(n)
    return places


def queue_key(decision_index: int, deployed: bool, level: int, score: float) -> int:
    """The integer queue key (ascending in queue order) of a finding with the decision
    `DECISIONS[decision_index]`, deployed somewhere or not, SSVC level and score.
    Raises ValueError for a value outside the ranges the key packs."""
    if not 0 <= decision_index <= _URGENT:
        raise ValueError(f"decision index {decision_index!r} is not one of DECISIONS'")
    if not 0 <= level < _LEVELS:
        raise ValueError(f"SSVC level {level!r} is outside 0-{_LEVELS - 1}")
    if not 0.0 <= score <= 100.0:  # NaN too
        raise ValueError(f"score {score!r} is outside 0-100")
    head = ((_URGENT - decision_index) * 2 + (0 if deployed else 1)) * _LEVELS
    return (head + _LEVELS - 1 - level) * (_STEPS + 1) + _STEPS - round(score * 10_000)


def queue_keys(
    decision: np.ndarray[Any, Any], deployed: np.ndarray[Any, Any],
    level: np.ndarray[Any, Any], score: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """`queue_key` of each place of four equally long columns, as int64 (the same values:
    `np.rint` rounds half to even like Python's `round`). Raises ValueError as it does."""
    d = np.asarray(decision).astype(np.int64)
    lv = np.asarray(level).astype(np.int64)
    s = np.asarray(score, dtype=np.float64)
    if ((d < 0) | (d > _URGENT)).any():
        raise ValueError("a decision index is not one of DECISIONS'")
    if ((lv < 0) | (lv >= _LEVELS)).any():
        raise ValueError(f"an SSVC level is outside 0-{_LEVELS - 1}")
    if not ((s >= 0.0) & (s <= 100.0)).all():  # NaN too
        raise ValueError("a score is outside 0-100")
    # In place: at ten million places each temporary is 80 MB.
    key = np.subtract(_URGENT, d, out=d)
    key *= 2
    key += ~np.asarray(deployed, dtype=bool)
    key *= _LEVELS
    key += _LEVELS - 1
    key -= lv
    key *= _STEPS + 1
    key += _STEPS
    steps = np.rint(s * 10_000)
    key -= steps.astype(np.int64)
    return key


def _level_of(settings: RankSettings) -> Callable[[tuple[Any, ...], tuple[Any, ...]], int]:
    """The SSVC level (`scoring.ssvc_level`) of a ranked finding's `facts` and `context`
    under `settings`: 0 when deployed nowhere."""
    exposure_index: dict[str, int] = {x: i for i, x in enumerate(EXPOSURES)}
    exposure_index["unknown"] = EXPOSURES.index(settings.unknown_exposure)
    impact_index = {h: i for i, h in enumerate(HUMAN_IMPACTS)}
    exploitation_index = EXPLOITATION_INDEX

    def level(facts: tuple[Any, ...], context: tuple[Any, ...]) -> int:
        # By position (facts: exploitation 0, automatable 1; context: deployed 0,
        # exposure 4, human impact 6).
        return (exploitation_index[facts[0]] + facts[1] + exposure_index[context[4]]
                + impact_index[context[6]]) if context[0] else 0

    return level


def queue_key_for(settings: RankSettings) -> Callable[[RankedFinding], Key]:
    """A ranked finding's queue key as the engine sorts it (the one `_Scorer.score`
    gives) under `settings`."""
    level_of, decision_index = _level_of(settings), _DECISION_INDEX

    def key(r: RankedFinding) -> Key:
        # By position (decision 3, score 2, finding_id 0, facts 4, context 5): the merge's
        # binary searches call this a score of times per rescored finding.
        context = r[5]
        return (-decision_index[r[3]], not context[0], -level_of(r[4], context), -r[2],
                len(r[0]), r[0])

    return key


def queue_key_of(settings: RankSettings) -> Callable[[RankedFinding], int]:
    """A ranked finding's integer queue key (`queue_key`) under `settings`."""
    level_of, decision_index = _level_of(settings), _DECISION_INDEX

    def key(r: RankedFinding) -> int:
        context = r[5]
        return queue_key(decision_index[r[3]], context[0], level_of(r[4], context), r[2])

    return key


def key_parts_of(settings: RankSettings) -> Callable[[RankedFinding], tuple[bool, int]]:
    """The parts of a ranked finding's queue key that its facts and context decide:
    (deployed somewhere, SSVC level) under `settings`."""
    level_of = _level_of(settings)

    def parts(r: RankedFinding) -> tuple[bool, int]:
        context = r[5]
        return bool(context[0]), level_of(r[4], context)

    return parts
