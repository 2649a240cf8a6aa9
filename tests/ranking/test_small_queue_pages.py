"""The home page (the priorities queue), its status fragment and the priorities API for a
team with no run, with an empty queue, with one finding, and after a failed run."""

from __future__ import annotations

import pytest
from django.db import connection

from bench.rerank import build
from tests.ranking.test_pages import _rows
from trustrank.accounts.models import Team
from trustrank.ranking.models import RankingRun, RunStatus
from trustrank.ranking.services import runs
from trustrank.ranking.services.requests import ranking_run_request

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_worker():
    runs._PREVIOUS.clear()
    yield
    runs._PREVIOUS.clear()


def _team(open_findings: int) -> Team:
    team_id = build(findings=2, services=6, edges=10, versions=2, seed=3)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE findings_finding SET state = 'resolved' WHERE team_id = %s AND id NOT IN "
            "(SELECT id FROM findings_finding WHERE team_id = %s ORDER BY id LIMIT %s)",
            [team_id, team_id, open_findings])
    return Team.objects.get(pk=team_id)


def _rank(team: Team) -> RankingRun:
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    runs.ranking_run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def _pages(client, api, make_user, team: Team) -> dict[str, object]:
    client.force_login(make_user(f"viewer-{team.pk}", team=team, role="viewer"))
    out: dict[str, object] = {}
    for path in ("/", "/?environment=prod", "/?environment=", "/priorities/status"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.content[:500])
        out[path] = response.content.decode()
    reader = api(team, "read")
    for path in ("/api/v1/priorities", "/api/v1/priorities?environment=prod",
                 "/api/v1/priorities?environment="):
        response = reader.get(path)
        assert response.status_code == 200, (path, response.content[:500])
        out[path] = response.json()
    return out


def test_a_team_with_no_run(client, api, make_user):
    pages = _pages(client, api, make_user, _team(0))
    assert "Nothing has been ranked yet" in pages["/"]
    for path in ("/api/v1/priorities", "/api/v1/priorities?environment=prod",
                 "/api/v1/priorities?environment="):
        assert pages[path] == {"count": 0, "next": None, "previous": None, "results": []}


@pytest.mark.parametrize("open_findings", [0, 1])
def test_a_team_with_an_empty_or_one_finding_queue(client, api, make_user, open_findings):
    team = _team(open_findings)
    run = _rank(team)
    assert run.status == RunStatus.DONE, run.error
    pages = _pages(client, api, make_user, team)
    plural = "" if open_findings == 1 else "s"
    assert f"{open_findings} finding{plural} ranked" in pages["/"]
    for path in ("/", "/?environment=prod", "/?environment="):
        rows = _rows(pages[path])
        if open_findings:
            assert len(rows) == 1 and "No open finding" not in rows[0], path
        else:
            assert len(rows) == 1 and "No open finding is ranked" in rows[0], path
    for path in ("/api/v1/priorities", "/api/v1/priorities?environment=prod",
                 "/api/v1/priorities?environment="):
        body = pages[path]
        assert body["count"] == open_findings, path
        assert [r["rank"] for r in body["results"]] == list(range(1, open_findings + 1))


def test_after_an_empty_queue_the_next_run_fills_the_home_page(client, api, make_user):
    """A demo starts ranking before its findings load: the empty queue's run, then one
    over the finding that came, and the home page lists it (once it showed the second
    run's IndexError instead)."""
    team = _team(0)
    assert _rank(team).counts["findings"] == 0
    with connection.cursor() as cur:
        cur.execute("UPDATE findings_finding SET state = 'in_triage', updated_at = now() "
                    "WHERE team_id = %s", [team.pk])
    run = _rank(team)
    assert run.status == RunStatus.DONE and run.incremental, run.error
    pages = _pages(client, api, make_user, team)
    assert "2 findings ranked" in pages["/"] and "IndexError" not in pages["/"]
    assert len(_rows(pages["/"])) == 2
    assert [r["rank"] for r in pages["/api/v1/priorities"]["results"]] == [1, 2]


def test_after_a_failed_run_the_pages_show_the_error_and_the_last_queue(
        client, api, make_user):
    team = _team(1)
    _rank(team)
    with connection.cursor() as cur:
        cur.execute("CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
        cur.execute("CREATE TRIGGER test_refuse BEFORE UPDATE ON ranking_rankingrun "
                    "FOR EACH ROW WHEN (NEW.status = 'done') EXECUTE FUNCTION test_refuse()")
        cur.execute("UPDATE findings_finding SET state = 'in_triage', updated_at = now() "
                    "WHERE team_id = %s", [team.pk])
    assert _rank(team).status == RunStatus.FAILED
    pages = _pages(client, api, make_user, team)
    assert "injected failure" in pages["/"] and "injected failure" in pages["/priorities/status"]
    assert [r["rank"] for r in pages["/api/v1/priorities"]["results"]] == [1]
    assert pages["/api/v1/priorities"]["count"] == 1
