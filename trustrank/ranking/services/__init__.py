"""Ranking runs: request (debounced), execute, store, and report what moved.

A run is a row (RankingRun) claimed with a conditional UPDATE, so a message delivered twice
runs it once. Execution gathers the team's inputs, ranks them with the pure engine
(incrementally when this process still holds the previous run's result), then writes in one
transaction: the distinct rank contexts, a RankChange per finding whose rank, score or
decision moved, and the new rank columns on the findings that changed (set-based, through a
temporary table filled with COPY).

One module per step (requests, runs, store); the public names are re-exported here.
"""

from trustrank.ranking.services.requests import (
    ranking_evidence_sweep,
    ranking_run_request,
    ranking_runs_sweep,
)
from trustrank.ranking.services.runs import RankingError, ranking_run_execute
from trustrank.ranking.services.store_contexts import context_of
from trustrank.ranking.services.store_history import ranking_changes
from trustrank.ranking.services.store_services import services_json

__all__ = [
    "RankingError",
    "context_of",
    "ranking_changes",
    "ranking_evidence_sweep",
    "ranking_run_execute",
    "ranking_run_request",
    "ranking_runs_sweep",
    "services_json",
]
