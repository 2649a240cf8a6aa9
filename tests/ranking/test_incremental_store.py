"""An incremental run stores exactly what a full run over the same evidence stores: the
shortcuts of the store (rows of unmoved findings reused, contexts keyed by identity,
fresh findings merged by binary search) must not change a rank, an environment rank, a
score, a decision, a context or a digest."""

from __future__ import annotations

import pytest
from django.db import connection

from bench.rerank import build
from trustrank.ranking.models import RankChange, RankingRun
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db


def _run(team_id: int) -> RankingRun:
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(
        pk=run.pk).error
    run.refresh_from_db()
    return run


def _stored(team_id: int) -> list[tuple[object, ...]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT finding_id, rank, env_rank, environment, score, decision, context_id "
            "FROM ranking_rankedfinding WHERE team_id = %s ORDER BY finding_id", [team_id])
        return cur.fetchall()


def _set_impact(team_id: int, service: str, impact: str) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runtime_deployment SET human_impact = %s WHERE service_name = %s AND "
            "environment_id IN (SELECT id FROM runtime_environment WHERE team_id = %s)",
            [impact, service, team_id])


def test_incremental_run_stores_what_a_full_run_stores():
    team_id = build(findings=3000, services=300, edges=1200, versions=60, seed=3)
    runs._PREVIOUS.clear()
    first = _run(team_id)
    assert not first.incremental
    for service, impact in (("svc-3", "very high"), ("svc-7", "low")):
        _set_impact(team_id, service, impact)
        incremental = _run(team_id)
        assert incremental.incremental and incremental.counts["moved"] > 0
        stored = _stored(team_id)
        assert RankChange.objects.filter(run=incremental).count() == incremental.counts["moved"]
        # The same evidence ranked from scratch by a worker that kept nothing.
        runs._PREVIOUS.clear()
        full = _run(team_id)
        assert not full.incremental
        assert _stored(team_id) == stored
        assert full.results_digest == incremental.results_digest
        assert full.counts["contexts"] == incremental.counts["contexts"]
        assert full.counts["moved"] == 0
