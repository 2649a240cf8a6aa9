"""A large team's rewritten queue goes into a table of its own, loaded bare, indexed after
and swapped in as the team's partition of the ranked rows (`ranking.services.store_table`);
the other teams' rows stay in the shared partition, and their readers do not wait on the
swap."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from bench.rerank import build
from tests.ranking.test_run_sequences import _execute, _stored
from trustrank.accounts.models import Team
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services import runs, store
from trustrank.ranking.services.store_table import SHARED, TeamTable, team_partition

_SIZES = {"findings": 240, "services": 24, "edges": 60, "versions": 12}


def _fresh(team_id: int) -> RankingRun:
    """A full run that stores the team's first queue (no row of the team left)."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team_id])
    runs._PREVIOUS.clear()
    run = _execute(team_id)
    assert run.status == "done", run.error
    return run


def _rows(team_id: int) -> list[tuple[object, ...]]:
    """The team's ranked rows as stored, but for the run that wrote them."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT finding_id, rank, env_rank, environment, score, decision, context_id, "
            "qkey, search_group FROM ranking_rankedfinding WHERE team_id = %s "
            "ORDER BY qkey, finding_id", [team_id])
        return cur.fetchall()


def _children(team_id: int) -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT inhrelid::regclass::text FROM pg_inherits "
                    "WHERE inhparent = to_regclass(%s)", [team_partition(team_id)])
        return [r[0] for r in cur.fetchall()]


def _child_of(team_id: int, run: RankingRun) -> bool:
    """Whether the team's partition has one child, the table `run` loaded."""
    children = _children(team_id)
    return len(children) == 1 and children[0].startswith(
        f"{team_partition(team_id)}_r{run.pk}_")


def _tables_like(pattern: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT relname FROM pg_class WHERE relname LIKE %s", [pattern])
        return [r[0] for r in cur.fetchall()]


def _exists(table: str) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
        return cur.fetchone()[0]


def _indexes(table: str) -> list[tuple[str, bool]]:
    """(definition with the table's name taken out, whether it is a partition of the
    parent's index) of each index of `table`."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_get_indexdef(i.indexrelid), EXISTS (SELECT 1 FROM pg_inherits h "
            "WHERE h.inhrelid = i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = %s::regclass ORDER BY 1", [table])
        return [(d.split(" USING ")[1], attached) for d, attached in cur.fetchall()]


def _in_shared(team_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {SHARED} WHERE team_id = %s", [team_id])
        return cur.fetchone()[0]


def _two_teams() -> tuple[int, int]:
    other = build(**_SIZES, seed=31)
    Team.objects.filter(pk=other).update(name="bench-other")
    return other, build(**_SIZES, seed=32)


@pytest.mark.django_db(transaction=True)
def test_a_large_rewrite_is_stored_in_the_teams_own_table_and_swapped_in(
        settings, monkeypatch):
    """Below the setting a team's queue is in the shared partition; above it, each
    rewrite (a first queue from the columns, a full run's rewrite row by row) is a new
    table with the parent's four indexes, attached as the team's partition's only child,
    the old one dropped; the rows, ranks and digests are those stored the old way, the
    other team's rows stay where they were, and a later incremental run writes through the
    parent into the team's table."""
    other, team = _two_teams()
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 10**9
    _fresh(other)
    shared_run = _fresh(team)
    expected, ranks = _rows(team), _stored(team)
    assert len(expected) > 100 and _children(team) == [] and _in_shared(team) == len(expected)
    other_rows = _rows(other)

    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    first = _fresh(team)
    (table,) = _children(team)
    assert table.startswith(f"{team_partition(team)}_r{first.pk}_")
    assert _rows(team) == expected and _stored(team) == ranks
    assert (first.results_digest, first.inputs_digest) == (
        shared_run.results_digest, shared_run.inputs_digest)
    assert _in_shared(team) == 0 and _in_shared(other) == len(other_rows)
    indexes = _indexes(table)
    assert [attached for _, attached in indexes] == [True] * 4
    assert sorted(d for d, _ in indexes) == sorted([
        "btree (finding_id, team_id)", "btree (team_id, qkey, finding_id)",
        "btree (team_id, search_group, qkey, finding_id)",
        "btree (team_id, environment, qkey, finding_id)"])

    again = _fresh(team)
    assert _child_of(team, again)
    assert not _exists(table)
    assert _rows(team) == expected

    # A full run over the stored queue that rewrites it row by row (`store._store_rows`).
    monkeypatch.setattr(runs, "store_first_from_columns", lambda **kwargs: None)
    monkeypatch.setattr(runs, "store_again_from_columns", lambda **kwargs: None)
    monkeypatch.setattr(store, "_REWRITE_ABOVE", -1)
    runs._PREVIOUS.clear()
    rewrite = _execute(team)
    assert rewrite.status == "done", rewrite.error
    assert _child_of(team, rewrite)
    assert _rows(team) == expected and rewrite.results_digest == shared_run.results_digest
    assert _rows(other) == other_rows

    # An incremental run deletes and inserts through the parent, in the team's table.
    monkeypatch.setattr(store, "_REWRITE_ABOVE", 250_000)
    closed = expected[0][0]
    Finding.objects.filter(pk=closed).update(state="resolved", updated_at=timezone.now())
    later = _execute(team)
    assert later.status == "done" and later.incremental, later.error
    assert [r[0] for r in _rows(team)] == [r[0] for r in expected[1:]]
    assert _child_of(team, rewrite)


@pytest.mark.django_db(transaction=True)
def test_a_run_that_fails_after_its_load_leaves_the_teams_table_as_it_was(
        settings, monkeypatch):
    """The new table, its indexes and the swap are the run's transaction's: a run that
    fails after its load leaves the team's table and rows as they were, and no table of
    its own."""
    team = build(**_SIZES, seed=33)
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    done = _fresh(team)
    before = _rows(team)

    def broken(*_args, **_kwargs):
        raise RuntimeError("due dates failed")

    monkeypatch.setattr(runs, "due_dates_apply", broken)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ranking_rankedfinding WHERE team_id = %s", [team])
    runs._PREVIOUS.clear()
    failed = _execute(team)
    assert failed.status != "done" and "due dates failed" in failed.error
    assert not _tables_like(f"{team_partition(team)}_r{failed.pk}_%")
    assert _child_of(team, done)
    assert _rows(team) == []  # the test's own delete, committed before the run
    monkeypatch.undo()
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    assert _rows(team) == [] and _fresh(team) and _rows(team) == before


@pytest.mark.django_db(transaction=True)
def test_while_a_swap_waits_to_commit_only_the_teams_own_readers_wait(settings):
    """Held between the swap and the commit, the team's partition is locked: a read of
    the team's rows waits, while another team's rows (in the shared partition) are read
    and written as ever; after the commit the team reads its new table."""
    other, team = _two_teams()
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    _fresh(other)
    _fresh(team)
    rows = _rows(team)
    swapped, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                pending = TeamTable(team, 10**9)
                new = pending.load_into(cur, len(rows))
                cur.execute(f"INSERT INTO {new} SELECT * FROM ranking_rankedfinding "
                            "WHERE team_id = %s", [team])
                pending.index(cur)
                pending.swap(cur)
                swapped.set()
                release.wait(30)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
            swapped.set()
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert swapped.wait(30) and not errors
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = '500ms'")
            cur.execute("SELECT count(*) FROM ranking_rankedfinding WHERE team_id = %s",
                        [other])
            assert cur.fetchone()[0] > 0
            cur.execute("UPDATE ranking_rankedfinding SET score = score WHERE team_id = %s",
                        [other])
            assert cur.rowcount > 0
            with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
                cur.execute("SELECT count(*) FROM ranking_rankedfinding WHERE team_id = %s",
                            [team])
            cur.execute("SET lock_timeout = 0")
    finally:
        release.set()
        thread.join()
    assert not errors
    assert _child_of(team, RankingRun(pk=10**9))
    assert _rows(team) == rows


@pytest.mark.django_db(transaction=True)
def test_ranks_counted_for_a_page_plan_only_their_teams_partitions(settings):
    """`ranks_of` names its findings' teams as constants: the ranks are those the statement
    counts without them, and PostgreSQL plans no other team's table (with twenty large
    teams, planning every partition tripled a page's rank count)."""
    from trustrank.ranking import positions
    from trustrank.ranking.ranks import _UNCOUNTED, ranks_of, team_ranks_of

    other, team = _two_teams()
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    _fresh(other)
    _fresh(team)
    assert _children(other) and _children(team)
    mine = [r[0] for r in _rows(team)][::7]
    theirs = [r[0] for r in _rows(other)][::11]
    for ids in (mine, theirs, mine + theirs):
        with connection.cursor() as cur:
            cur.execute(positions.ranks_sql(positions.PRODUCT), {"ids": positions.ids_text(ids)})
            unpruned = {fid: (rank, env) for fid, rank, env in cur.fetchall()}
        assert len(unpruned) == len(ids)
        assert ranks_of(ids) == unpruned
        assert team_ranks_of(ids) == {fid: rank for fid, (rank, _) in unpruned.items()}
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + positions.ranks_sql(positions.PRODUCT, teams=True)
                    + _UNCOUNTED.format(columns="rank, r.env_rank"),
                    {"ids": positions.ids_text(mine), "teams": positions.ids_text([team])})
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert _children(team)[0] in plan
    assert _children(other)[0] not in plan and SHARED not in plan
    assert ranks_of([]) == {}


@pytest.mark.django_db(transaction=True)
def test_a_past_runs_ranks_read_no_other_teams_rows(settings):
    """An export as of a past run joins the ranked rows on the team too: the plan scans no
    other team's table (on the finding alone, its hash join read every team's rows)."""
    from trustrank.exports.services.rows import _RANKS_AS_OF

    other, team = _two_teams()
    settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE = 50
    _fresh(other)
    run = _fresh(team)
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, COSTS OFF) SELECT " + _RANKS_AS_OF, [run.pk] * 3)
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("SELECT " + _RANKS_AS_OF, [run.pk] * 3)
        ranks = cur.fetchone()[0]
    # Another team's table and the shared one are pruned when the plan runs, or probed for
    # no row: none of their rows is read.
    for table in (_children(other)[0], SHARED):
        lines = [line for line in plan.splitlines() if f" on {table} " in line]
        assert lines and all("never executed" in line or " rows=0 " in line for line in lines)
    mine = [line for line in plan.splitlines() if f" on {_children(team)[0]} " in line]
    assert mine and all(" rows=240 " in line for line in mine)
    if isinstance(ranks, str):
        import json

        ranks = json.loads(ranks)
    assert sorted(map(int, ranks)) == sorted(r[0] for r in _rows(team))
