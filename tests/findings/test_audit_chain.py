"""Audit events form a hash chain per team: every writer links, verification finds the first
event that was changed, removed or re-sealed, and concurrent writers never fork a chain."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import ROOT, subprocess_env
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit import (
    Actor,
    audit_event_digest,
    audit_event_record,
    audit_events_record_bulk,
)
from trustrank.findings.services.audit_chain import ChainReport, audit_chain_verify
from trustrank.findings.services.reconcile import FindingSpec, findings_reconcile


def record(team_id, action="created", **kw):
    return audit_event_record(actor=Actor.system("test"), action=action, team_id=team_id, **kw)


def tamper(sql, params=()):
    """Rewrite the trail as an attacker with table rights would: trigger off, change, back on.
    Inside the test's transaction, so it is rolled back afterwards."""
    with connection.cursor() as cur:
        # Settle this transaction's deferred foreign-key checks first: PostgreSQL refuses
        # ALTER TABLE while trigger events are pending.
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute("ALTER TABLE findings_auditevent DISABLE TRIGGER findings_auditevent_no_update")
        cur.execute(sql, params)
        cur.execute("ALTER TABLE findings_auditevent ENABLE TRIGGER findings_auditevent_no_update")


@pytest.mark.django_db
class TestChain:
    def test_events_link_to_their_predecessor_in_each_team(self, team, other_team):
        a1 = record(team.pk)
        b1 = record(other_team.pk)
        a2 = record(team.pk, action="state_changed", before={"state": "in_triage"},
                    after={"state": "exploitable"}, reason="reachable")
        site = record(None, action="feed_imported", subject_type="feed.osv", subject_id="7")
        for e in (a1, b1, a2, site):
            e.refresh_from_db()
            assert len(e.digest) == 64 and e.digest == audit_event_digest(e)
        assert a1.prev_digest == "" and b1.prev_digest == "" and site.prev_digest == ""
        assert a2.prev_digest == a1.digest
        report = audit_chain_verify(team_id=team.pk)
        assert report == ChainReport(intact=True, events=2, first_broken_id=None, reason="",
                                     head_digest=a2.digest, head_event_id=a2.pk)
        assert report.as_dict() == {"intact": True, "events": 2, "first_broken_id": None,
                                    "reason": "", "head_digest": a2.digest,
                                    "head_event_id": a2.pk}
        # Up to an event: the chain as a checkpoint then saw it.
        upto = audit_chain_verify(team_id=team.pk, upto_id=a1.pk)
        assert (upto.events, upto.head_event_id, upto.head_digest) == (1, a1.pk, a1.digest)
        assert audit_chain_verify(team_id=None).events == 1
        assert audit_chain_verify(team_id=other_team.pk).head_digest == b1.digest

    def test_an_empty_chain_is_intact(self, team):
        assert audit_chain_verify(team_id=team.pk).as_dict() == {
            "intact": True, "events": 0, "first_broken_id": None, "reason": "",
            "head_digest": "", "head_event_id": None,
        }

    def test_the_digest_covers_what_jsonb_gives_back(self, team):
        # Exponent-form and tuple values come back from jsonb in another spelling.
        e = record(team.pk, after={"big": 1e16, "small": 1.5e-7, "pair": (1, 2), "ü": "é",
                                   "neg_zero": -0.0, "huge": 2**70, "deep": [{"x": 1e20}]},
                   subject_id="x" * 300, environment="prod")
        assert audit_chain_verify(team_id=team.pk).intact
        e.refresh_from_db()
        assert e.after["big"] == 10**16 and len(e.subject_id) == 255
        assert e.after["huge"] == 2**70 and e.after["deep"] == [{"x": 10**20}]
        assert e.digest == audit_event_digest(e)

    def test_bulk_writes_chain_in_order_across_teams(self, team, other_team):
        first = record(team.pk)
        actor = Actor.system("bulk")
        batch = [actor.event(action="created", team_id=t, reason=str(i))
                 for i, t in enumerate([team.pk, other_team.pk, team.pk, None, team.pk])]
        assert audit_events_record_bulk(batch) == 5
        mine = list(AuditEvent.objects.filter(team=team).order_by("id"))
        assert [e.reason for e in mine] == ["", "0", "2", "4"]
        assert mine[1].prev_digest == first.digest
        assert all(b.prev_digest == a.digest for a, b in itertools.pairwise(mine))
        for t in (team.pk, other_team.pk, None):
            assert audit_chain_verify(team_id=t).intact

    def test_reconcile_writes_through_the_chain(self, team):
        record(team.pk, action="commented")
        spec = FindingSpec(fingerprint="r-1", title="lost context", severity="medium",
                           category="broken_context", source="traces",
                           values={"environment": "prod"})
        findings_reconcile(team_id=team.pk, kind="reliability", specs=[spec], existing=[],
                           actor=Actor.system("test"), resolve_missing=False)
        events = list(AuditEvent.objects.filter(team=team).order_by("id"))
        assert [e.action for e in events] == ["commented", "created"]
        assert events[1].prev_digest == events[0].digest != ""
        assert audit_chain_verify(team_id=team.pk).intact

    def test_a_changed_event_is_reported_with_its_id(self, team):
        events = [record(team.pk, reason=f"r{i}") for i in range(5)]
        tamper("UPDATE findings_auditevent SET reason = 'nothing to see' WHERE id = %s",
               [events[2].pk])
        report = audit_chain_verify(team_id=team.pk)
        assert not report.intact and report.first_broken_id == events[2].pk
        assert "changed" in report.reason and report.events == 5

    def test_a_resealed_event_breaks_the_link_after_it(self, team):
        events = [record(team.pk, reason=f"r{i}") for i in range(4)]
        e = AuditEvent.objects.get(pk=events[1].pk)
        e.reason = "rewritten"
        tamper("UPDATE findings_auditevent SET reason = 'rewritten', digest = %s WHERE id = %s",
               [audit_event_digest(e), e.pk])
        report = audit_chain_verify(team_id=team.pk)
        assert report.first_broken_id == events[2].pk and "follow" in report.reason

    def test_removed_events_are_found(self, team):
        events = [record(team.pk) for _ in range(4)]
        tamper("DELETE FROM findings_auditevent WHERE id = %s", [events[2].pk])
        assert audit_chain_verify(team_id=team.pk).first_broken_id == events[3].pk
        tamper("DELETE FROM findings_auditevent WHERE id = %s", [events[0].pk])
        assert audit_chain_verify(team_id=team.pk).first_broken_id == events[1].pk

    def test_an_event_without_digest_is_broken(self, team):
        e = record(team.pk)
        tamper("UPDATE findings_auditevent SET digest = '' WHERE id = %s", [e.pk])
        report = audit_chain_verify(team_id=team.pk)
        assert report.first_broken_id == e.pk and "no digest" in report.reason

    def test_updates_stay_refused(self, team):
        record(team.pk)
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), \
                connection.cursor() as cur:
            cur.execute("UPDATE findings_auditevent SET digest = ''")


@pytest.mark.django_db
class TestCommand:
    def test_every_chain_intact(self, team, other_team, capsys):
        record(team.pk)
        record(None, action="feed_imported")
        call_command("audit_verify")
        out = capsys.readouterr().out
        assert f"team payments (id {team.pk}): intact, 1 events" in out
        assert f"team intruders (id {other_team.pk}): intact, 0 events" in out
        assert "site-wide: intact, 1 events" in out

    def test_a_broken_chain_is_named_and_fails(self, team, other_team, capsys):
        events = [record(team.pk) for _ in range(3)]
        record(other_team.pk)
        tamper("UPDATE findings_auditevent SET actor_label = 'someone else' WHERE id = %s",
               [events[1].pk])
        with pytest.raises(CommandError) as failed:
            call_command("audit_verify")
        assert failed.value.returncode == 1
        out = capsys.readouterr().out
        assert f"team payments (id {team.pk}): BROKEN at event {events[1].pk}" in out
        assert "team intruders" in out and "intruders (id" in out
        # One team by name or by id; the other team's chain is fine.
        call_command("audit_verify", "--team", "intruders")
        with pytest.raises(CommandError):
            call_command("audit_verify", "--team", str(team.pk))
        with pytest.raises(CommandError, match="no team"):
            call_command("audit_verify", "--team", "nobody")


@pytest.mark.django_db(transaction=True)
def test_command_exit_status_from_the_shell(team):
    events = [record(team.pk) for _ in range(2)]

    def run():
        return subprocess.run([sys.executable, "manage.py", "audit_verify", "--team", "payments"],
                              cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                              timeout=120, check=False)

    ok = run()
    assert ok.returncode == 0, ok.stderr
    with transaction.atomic():
        tamper("UPDATE findings_auditevent SET reason = 'x' WHERE id = %s", [events[0].pk])
    broken = run()
    assert broken.returncode == 1
    assert f"BROKEN at event {events[0].pk}" in broken.stdout


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_fork_the_chain(team, other_team):
    """Writers that each hold their transaction open a moment after appending: without the
    per-team lock two of them would read the same predecessor."""
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(8):
                with transaction.atomic():
                    if i % 2:
                        audit_event_record(actor=Actor.system(f"w{n}"), action="commented",
                                           team_id=team.pk, reason=f"{n}-{i}")
                    else:
                        actor = Actor.system(f"w{n}")
                        audit_events_record_bulk(
                            [actor.event(action="created", team_id=t, reason=f"{n}-{i}")
                             for t in (team.pk, other_team.pk, team.pk)]
                        )
                    time.sleep(0.005)
        except BaseException as exc:  # reported to the test below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    report = audit_chain_verify(team_id=team.pk)
    assert report.intact, report
    assert report.events == 6 * (4 * 1 + 4 * 2)
    other = audit_chain_verify(team_id=other_team.pk)
    assert other.intact and other.events == 6 * 4
    digests = list(AuditEvent.objects.filter(team=team).values_list("prev_digest", flat=True))
    assert len(set(digests)) == len(digests)  # no two events share a predecessor


@pytest.mark.django_db(transaction=True)
def test_backfill_links_old_events_and_updates_stay_refused():
    executor = MigrationExecutor(connection)
    executor.migrate([("findings", "0006_triage_owner_due_chain")])
    old = executor.loader.project_state([("findings", "0006_triage_owner_due_chain")]).apps
    Team = old.get_model("accounts", "Team")
    OldEvent = old.get_model("findings", "AuditEvent")
    t = Team.objects.create(name="before-chain")
    for i in range(5):
        OldEvent.objects.create(team=t, action="created", actor_kind="system",
                                actor_label="system: old", reason=f"old {i}",
                                after={"n": i, "f": 0.25})
    OldEvent.objects.create(team=None, action="feed_imported", actor_kind="system",
                            actor_label="system: feed")
    assert set(OldEvent.objects.values_list("digest", flat=True)) == {""}

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    report = audit_chain_verify(team_id=t.pk)
    assert report.intact and report.events == 5
    assert audit_chain_verify(team_id=None).intact
    assert "" not in set(AuditEvent.objects.values_list("digest", flat=True))
    # New events continue the backfilled chain.
    record(t.pk)
    assert audit_chain_verify(team_id=t.pk).events == 6
    assert audit_chain_verify(team_id=t.pk).intact
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), \
            connection.cursor() as cur:
        cur.execute("UPDATE findings_auditevent SET reason = 'rewritten'")
