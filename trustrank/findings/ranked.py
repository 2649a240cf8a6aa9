"""A finding's latest contextual rank, score and decision, read from its ranked row
(trustrank.ranking.RankedFinding): the properties `Finding` takes from `RankedFindingFields`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ObjectDoesNotExist

# A ranked finding's `rank` and `env_rank` columns hold its ranks as of the run that last
# wrote its ranked row; the current ones are counted from its queue key by the ranking app
# (trustrank.ranking.ranks), which this lower layer may not import. So a list sets them
# under these names on its rows (trustrank.ranking.selectors.ranks_attach), and a single
# finding counts them through the counter the ranking app registers when it loads.
RANK_ANNOTATION = "queue_rank"
ENV_RANK_ANNOTATION = "queue_env_rank"
_COUNTED = "_ranks_counted"
# (finding ids, teams=their teams) -> {id: (rank, env rank)}
RanksCounter = Callable[..., dict[int, tuple[int, int]]]
_RANKS_COUNTER: dict[str, RanksCounter] = {}


def finding_ranks_counter_register(counter: RanksCounter) -> None:
    """Set how a finding's current ranks are counted: (finding ids, teams=their teams) ->
    {id: (rank, env rank)}."""
    _RANKS_COUNTER["counter"] = counter


class RankedFindingFields:
    """None (or '') until ranked."""

    pk: Any
    team_id: Any

    @property
    def ranked_or_none(self) -> Any:
        try:
            return self.ranked  # type: ignore[attr-defined]
        except ObjectDoesNotExist:
            return None

    @property
    def rank(self) -> int | None:
        """The finding's place in its team's queue, counted from its queue key: the
        `RANK_ANNOTATION` its queryset carries, else one query (`_ranks_counted`)."""
        if RANK_ANNOTATION in self.__dict__:
            return self.__dict__[RANK_ANNOTATION]  # type: ignore[no-any-return]
        return self._ranks_counted()[0]

    @property
    def env_rank(self) -> int | None:
        """The finding's place in its environment's queue (`ENV_RANK_ANNOTATION`, else one
        query shared with `rank`)."""
        if ENV_RANK_ANNOTATION in self.__dict__:
            return self.__dict__[ENV_RANK_ANNOTATION]  # type: ignore[no-any-return]
        return self._ranks_counted()[1]

    def _ranks_counted(self) -> tuple[int | None, int | None]:
        """(rank, environment rank) counted for this one finding, kept on its ranked row so
        that both properties cost one query, and a reloaded row counts again."""
        r = self.ranked_or_none
        if r is None:
            return None, None
        if _COUNTED not in r.__dict__:
            counter = _RANKS_COUNTER.get("counter")
            counted = counter([self.pk], teams=[self.team_id]) if counter is not None else {}
            r.__dict__[_COUNTED] = counted.get(self.pk, (r.rank, r.env_rank))
        return r.__dict__[_COUNTED]  # type: ignore[no-any-return]

    @property
    def rank_environment(self) -> str:
        r = self.ranked_or_none
        return "" if r is None else r.environment

    @property
    def score(self) -> float | None:
        r = self.ranked_or_none
        return None if r is None else r.score

    @property
    def decision(self) -> str:
        r = self.ranked_or_none
        return "" if r is None else r.decision

    @property
    def rank_context(self) -> Any:
        r = self.ranked_or_none
        return None if r is None else r.context
