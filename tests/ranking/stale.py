"""Stored ranks made stale on purpose: a ranking run writes only the rows whose own key
changed, so the `rank` and `env_rank` columns of a ranked row are its ranks as of the run
that last wrote it. A reader that still reads them shows these wrong, reversed values
instead of the ranks counted from the key (trustrank/ranking/ranks.py).

The readers' tests build teams with `bench.rerank.build`, rank them with a real run
(`ranked_team`), record the ranks the run gave (`run_truth`), then make the stored ones
stale (`stale_stored_ranks`; `stale_teams` does all three for two teams)."""

from __future__ import annotations

from django.db import connection

from bench.rerank import build
from trustrank.accounts.models import Team
from trustrank.ranking.models import RunStatus
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

STALE = 1_000_000

# finding id -> (team, rank, environment, environment rank), as the run ranked them.
Truth = dict[int, tuple[int, int, str, int]]


def stale_stored_ranks(team_id: int | None = None) -> None:
    """Reverse and offset the stored `rank` and `env_rank` of every ranked row (of one team),
    leaving keys and bucket counts as the run left them."""
    where = "" if team_id is None else " WHERE team_id = %s"
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE ranking_rankedfinding SET rank = {STALE} - rank,"
            f" env_rank = {STALE} - env_rank{where}",
            [] if team_id is None else [team_id],
        )


def ranked_team(name: str, seed: int, *, findings: int, services: int, edges: int,
                versions: int) -> Team:
    """A team built by `bench.rerank.build` (its sizes and seed), ranked by a real run."""
    team_id = build(findings=findings, services=services, edges=edges, versions=versions,
                    seed=seed)
    Team.objects.filter(pk=team_id).update(name=name)
    run = ranking_run_request(team_id=team_id, trigger="test", delay_seconds=0)
    runs.ranking_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.DONE, run.error
    return Team.objects.get(pk=team_id)


def run_truth(team_ids: list[int]) -> Truth:
    """The teams' ranks as the last run left them: places in the key order, by team and by
    team and environment, which are the ranks it stored (checked: the runs still write dense
    ranks, so the key order is theirs). Read before `stale_stored_ranks`."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT finding_id, team_id, environment, row_number() OVER (PARTITION BY team_id"
            " ORDER BY qkey, finding_id), row_number() OVER (PARTITION BY team_id, environment"
            " ORDER BY qkey, finding_id), rank, env_rank FROM ranking_rankedfinding"
            " WHERE team_id = ANY(%s)", [team_ids])
        rows = cur.fetchall()
    assert all(rank == stored and env_rank == stored_env
               for _f, _t, _e, rank, env_rank, stored, stored_env in rows)
    return {fid: (team, rank, env, env_rank) for fid, team, env, rank, env_rank, _s, _se in rows}


def stale_teams(names: tuple[str, str], *, findings: int, services: int, edges: int,
                versions: int) -> tuple[Team, Team, Truth]:
    """Two teams (seeds 3 and 5) ranked by real runs, their ranks recorded, then every stored
    rank made stale."""
    sizes = {"findings": findings, "services": services, "edges": edges, "versions": versions}
    first = ranked_team(names[0], 3, **sizes)
    second = ranked_team(names[1], 5, **sizes)
    truth = run_truth([first.pk, second.pk])
    stale_stored_ranks()
    return first, second, truth
