"""The one audit table is append-only, enforced by PostgreSQL itself."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from trustrank.accounts.principal import principal_for_key, principal_for_user
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.audit import Actor, audit_event_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def event(team):
    return audit_event_record(actor=Actor.system("test"), action="created", team_id=team.pk)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE findings_auditevent SET reason = 'rewritten'",
        "DELETE FROM findings_auditevent",
        "TRUNCATE findings_auditevent",
        "TRUNCATE findings_auditevent CASCADE",
    ],
)
def test_raw_sql_cannot_rewrite_the_trail(event, sql):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), \
            connection.cursor() as cur:
        # The test suite's sessions may empty tables between tests; this one may not.
        cur.execute("SET LOCAL trustrank.allow_audit_truncate = off")
        # The event was inserted in this test's transaction: settle its deferred foreign-key
        # checks, or PostgreSQL refuses TRUNCATE for that reason before the trigger runs.
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute(sql)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), max(reason) FROM findings_auditevent")
        assert cur.fetchone() == (1, "")


def test_insert_is_allowed_and_save_twice_is_not(event):
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    audit_event_record(actor=Actor.system("test"), action="commented", team_id=event.team_id)
    assert AuditEvent.objects.count() == 2


def test_actor_kinds(team, make_user):
    from trustrank.accounts.services import api_key_issue

    user = make_user("ann", team=team)
    key = api_key_issue(team=team, name="ci", scopes=["triage"]).api_key
    by_user = Actor.of(principal_for_user(user))
    by_key = Actor.of(principal_for_key(key))
    assert (by_user.kind, by_user.label) == ("user", "ann")
    assert (by_key.kind, by_key.api_key_id, by_key.label) == ("api_key", key.pk, "api-key:ci")
    e1 = audit_event_record(actor=by_user, action="x", team_id=team.pk)
    e2 = audit_event_record(actor=by_key, action="x", team_id=team.pk)
    e1.refresh_from_db()
    e2.refresh_from_db()
    assert e1.actor_user_id == user.pk and e2.actor_key_id == key.pk
