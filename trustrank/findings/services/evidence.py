"""Evidence changed: recorded here by the apps that load it, taken by the ranking app.

Triggers point down: a load says what changed in this low layer, and the ranking app (above
every evidence app) decides what to run about it (trustrank.ranking.services.requests,
`ranking_evidence_sweep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from trustrank.findings.records import EvidenceChange


@dataclass(frozen=True)
class Change:
    team_id: int | None
    what: str
    at: datetime
    kind: str = ""


def evidence_change_record(*, team_id: int | None, what: str, kind: str = "") -> None:
    """Record that a team's evidence changed (`team_id` None: a feed shared by every team);
    `kind` says what kind of evidence (an ingest job's kind), for the ranking app to pick
    how soon to rank. Call it in the transaction that stores the evidence, so the change
    and the evidence commit together."""
    EvidenceChange.objects.create(team_id=team_id, what=what[:200], kind=kind[:32])


def evidence_changes_take() -> list[Change]:
    """Remove and return the recorded changes, oldest first. Call it in the transaction that
    acts on them: should that roll back, the rows are back for the next taker. A concurrent
    taker waits on the rows this one deleted and then finds them gone, so a change is taken
    once."""
    table = EvidenceChange._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f'DELETE FROM "{table}" RETURNING team_id, what, created_at, kind')  # noqa: S608
        rows = cur.fetchall()
    return sorted((Change(team_id=t, what=w, at=a, kind=k) for t, w, a, k in rows),
                  key=lambda c: c.at)
