"""A receiver's job: the row and its payload reach PostgreSQL in one statement, committed
together before the receiver answers, and never one without the other."""

from __future__ import annotations

import tempfile
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import pq

from ingest.models import IngestJob, IngestPayload
from ingest.services import job_create
from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr("trustrank.jobs.tasks.jobs_run.apply_async",
                        lambda args, **kw: sent.append(args[1]))
    return sent


def _create(team: Any, payload: bytes = b"payload") -> IngestJob:
    principal = Principal(scopes_by_team={team.pk: frozenset(Scope.values)})
    return job_create(team=team, kind="sbom", payload=payload, principal=principal,
                      params={"projectName": "p"}, prepared=b"columns")


def _other_connection() -> psycopg.Connection[Any]:
    params = connection.get_connection_params()
    return psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"},
                           autocommit=True)


def test_the_job_and_its_payload_are_committed_in_one_round_trip(team, enqueued):
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            job = _create(team)
        finally:
            pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t")[2] for line in trace.read().splitlines()
                if line.startswith("F\t")]
    # One Sync (an extended-protocol statement); no BEGIN, no COMMIT: autocommit.
    assert [kind for kind in sent if kind in ("Sync", "Query")] == ["Sync"], sent
    with _other_connection() as other:
        row = other.execute(
            "SELECT j.kind, j.status, j.params ->> 'projectName', p.data, p.prepared FROM ingest_ingestjob j "
            "JOIN ingest_ingestpayload p ON p.job_id = j.id WHERE j.id = %s", [job.pk],
        ).fetchone()
    assert row == ("sbom", "queued", "p", b"payload", b"columns")
    assert enqueued == [str(job.pk)]
    stored = IngestJob.objects.get(pk=job.pk)
    assert stored.created_at == job.created_at and stored.team_id == team.pk


def test_a_payload_that_cannot_be_stored_leaves_no_job(team, enqueued):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_payload() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'disk full'; END $$; "
            "CREATE TRIGGER test_refuse_payload BEFORE INSERT ON ingest_ingestpayload "
            "FOR EACH ROW EXECUTE FUNCTION test_refuse_payload()"
        )
    try:
        with pytest.raises(Exception, match="disk full"):
            _create(team)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse_payload ON ingest_ingestpayload; "
                           "DROP FUNCTION test_refuse_payload()")
    assert not IngestJob.objects.exists() and not IngestPayload.objects.exists()
    assert enqueued == []


def test_inside_a_transaction_the_job_waits_for_its_commit(team, enqueued):
    from django.db import transaction

    with transaction.atomic():
        job = _create(team)
        with _other_connection() as other:
            seen = other.execute("SELECT count(*) FROM ingest_ingestjob").fetchone()
        assert seen == (0,) and enqueued == []
    assert enqueued == [str(job.pk)]
    assert bytes(IngestPayload.objects.get(job_id=job.pk).data) == b"payload"
