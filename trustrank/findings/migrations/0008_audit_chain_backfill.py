"""Link the audit events written before the hash chain existed: every team's events (and the
site-wide ones) in id order, each with its predecessor's digest and its own.

The append-only trigger refuses UPDATE, so this migration disables it for its own
transaction and enables it again before it commits: nothing else can write in between
(ALTER TABLE holds an exclusive lock on the table to the end of the transaction), and after it
updates are refused as before. Reversing leaves the digests (they are blank-able columns and
the trigger would refuse clearing them).
"""

from typing import Any

from django.db import migrations, models

BATCH = 2000

UPDATE = """
UPDATE findings_auditevent AS e SET prev_digest = v.prev, digest = v.digest
FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS v(id, prev, digest)
WHERE e.id = v.id
"""


def backfill(apps: Any, schema_editor: Any) -> None:
    # The one digest function, so what the backfill writes is what verification checks.
    from trustrank.findings.services.audit import audit_event_digest

    AuditEvent = apps.get_model("findings", "AuditEvent")
    connection = schema_editor.connection
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE findings_auditevent DISABLE TRIGGER findings_auditevent_no_update")
    teams = AuditEvent.objects.order_by().values_list("team_id", flat=True).distinct()
    for team_id in list(teams):
        prev = ""
        batch: list[tuple[int, str, str]] = []
        events = AuditEvent.objects.filter(team_id=team_id).order_by("id")
        for event in events.iterator(chunk_size=BATCH):
            event.prev_digest = prev
            prev = audit_event_digest(event)
            batch.append((event.pk, event.prev_digest, prev))
            if len(batch) >= BATCH:
                _write(connection, batch)
                batch = []
        if batch:
            _write(connection, batch)
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE findings_auditevent ENABLE TRIGGER findings_auditevent_no_update")


def _write(connection: Any, batch: list[tuple[int, str, str]]) -> None:
    ids, prevs, digests = zip(*batch, strict=True)
    with connection.cursor() as cur:
        cur.execute(UPDATE, [list(ids), list(prevs), list(digests)])


class Migration(migrations.Migration):
    dependencies = [("findings", "0007_search_bulk_due")]

    operations = [
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["team", "id"], name="auditevent_team_id"),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["team", "action", "id"], name="auditevent_team_action_id"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
