"""An export as of a past ranking run shows each finding's rank at that run, rebuilt from
the keys its own history rows record (history has no row for a rank that shifted because
another finding rose or left)."""

from __future__ import annotations

import pytest
from django.db import connection

from bench.rerank import build
from trustrank.exports.services.rows import _past_rank
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankedFinding, RankingRun
from trustrank.ranking.ranks import ranks_of
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db


def _run(team_id: int) -> RankingRun:
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    assert runs.ranking_run_execute(run_id=run.pk) == "done"
    return RankingRun.objects.get(pk=run.pk)


def _ranks_now(team_id: int) -> dict[int, int | None]:
    ids = list(Finding.objects.filter(team_id=team_id).values_list("pk", flat=True))
    counted = ranks_of(ids)
    return {fid: counted[fid][0] if fid in counted else None for fid in ids}


def _ranks_as_of(team_id: int, run: RankingRun) -> dict[int, int | None]:
    return dict(Finding.objects.filter(team_id=team_id).annotate(
        past=_past_rank("rank", run.pk)).values_list("pk", "past"))


def test_a_past_runs_ranks_are_rebuilt_from_own_changes_only():
    team_id = build(findings=300, services=40, edges=120, versions=20, seed=23)
    runs._PREVIOUS.clear()
    chain: list[tuple[RankingRun, dict[int, int | None]]] = []
    first = _run(team_id)
    chain.append((first, _ranks_now(team_id)))
    queue = list(RankedFinding.objects.filter(team_id=team_id).order_by(
        "qkey", "finding_id").values_list("finding_id", flat=True))
    low, top, middle = queue[-1], queue[0], queue[len(queue) // 2]
    # The last finding rises: every finding it passes shifts down one, with no history.
    with connection.cursor() as cur:
        cur.execute("UPDATE findings_finding SET epss = 0.99, epss_percentile = 0.99, "
                    "cvss_score = 10.0, in_kev = true, updated_at = now() WHERE id = %s", [low])
    rose = _run(team_id)
    assert list(RankChange.objects.filter(run=rose).values_list("finding_id", flat=True)) == [low]
    chain.append((rose, _ranks_now(team_id)))
    # The head leaves the queue (all shift up one), then a finding leaves and comes back.
    for ids, state in (([top], "resolved"), ([middle], "resolved"), ([middle], "in_triage")):
        with connection.cursor() as cur:
            cur.execute("UPDATE findings_finding SET state = %s, updated_at = now() "
                        "WHERE id = ANY(%s)", [state, ids])
        chain.append((_run(team_id), _ranks_now(team_id)))
    shifted = [fid for fid in queue if fid not in (low, top, middle)]
    assert chain[1][1][shifted[-1]] != chain[0][1][shifted[-1]]
    assert not RankChange.objects.filter(finding_id__in=shifted).exists()
    for run, ranks in chain:
        assert _ranks_as_of(team_id, run) == ranks, run.pk
