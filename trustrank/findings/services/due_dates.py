"""Due dates from the ranking decision, by the team's TriagePolicy.

A finding's due date is the day it first got its current decision plus the policy's days for
that decision (no days: no due date). A ranking run calls `finding_due_dates_apply` at its end;
one set-based upsert of FindingDue records each ranked open finding's decision and the day it
got it, and recomputes the due date of every finding whose date no person set by hand. These
are the service's own writes: the finding's version (what an analyst's change is checked
against) moves only when a person changes its triage, its due date included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import psycopg
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.records import TriagePolicy
from trustrank.findings.services.triage import TriageForbidden

DECISION_FIELDS = {
    "immediate": "immediate_days",
    "out-of-cycle": "out_of_cycle_days",
    "scheduled": "scheduled_days",
    "defer": "defer_days",
}


@dataclass(frozen=True)
class PolicyDays:
    immediate_days: int | None = 1
    out_of_cycle_days: int | None = 7
    scheduled_days: int | None = 30
    defer_days: int | None = None

    def days_for(self, decision: str) -> int | None:
        name = DECISION_FIELDS.get(decision)
        return None if name is None else getattr(self, name)


def triage_policy_for(*, team_id: int) -> PolicyDays:
    """The team's policy, or the defaults when it has no row."""
    row = TriagePolicy.objects.filter(team_id=team_id).first()
    if row is None:
        return PolicyDays()
    return PolicyDays(
        immediate_days=row.immediate_days,
        out_of_cycle_days=row.out_of_cycle_days,
        scheduled_days=row.scheduled_days,
        defer_days=row.defer_days,
    )


_APPLY_SQL = """
WITH c AS (
    SELECT r.finding_id, r.decision,
           CASE WHEN d.decision = r.decision AND d.since IS NOT NULL
                THEN d.since ELSE %(today)s::date END AS since,
           CASE r.decision
                WHEN 'immediate' THEN %(immediate)s::integer
                WHEN 'out-of-cycle' THEN %(out_of_cycle)s::integer
                WHEN 'scheduled' THEN %(scheduled)s::integer
                WHEN 'defer' THEN %(defer)s::integer
           END AS days,
           d.finding_id IS NOT NULL AS known, COALESCE(d.manual, false) AS manual,
           d.decision AS old_decision, d.since AS old_since, d.due_date AS old_due
    FROM {ranked} r
    JOIN findings_finding f ON f.id = r.finding_id
    LEFT JOIN findings_findingdue d ON d.finding_id = r.finding_id
    WHERE r.team_id = %(team)s AND f.team_id = %(team)s AND f.state = ANY(%(open)s)
      AND (%(run)s::bigint IS NULL OR r.run_id = %(run)s::bigint)
      AND (%(ids)s::bigint[] IS NULL OR r.finding_id = ANY(%(ids)s::bigint[]))
), todo AS (
    -- Only the rows that change, in id order (as bulk triage writes its own).
    SELECT finding_id, decision, since,
           CASE WHEN manual THEN old_due ELSE since + days END AS due, manual
    FROM c
    WHERE NOT known
       OR old_decision IS DISTINCT FROM decision
       OR old_since IS DISTINCT FROM since
       OR (NOT manual AND old_due IS DISTINCT FROM since + days)
    ORDER BY finding_id
)
INSERT INTO findings_findingdue AS d (finding_id, team_id, decision, since, due_date, manual)
SELECT finding_id, %(team)s, decision, since, due, manual FROM todo
ON CONFLICT (finding_id) DO UPDATE SET
    decision = EXCLUDED.decision,
    since = EXCLUDED.since,
    -- A date set by hand since the rows were read stays.
    due_date = CASE WHEN d.manual THEN d.due_date ELSE EXCLUDED.due_date END
"""


def settled_decision_sql(policy: PolicyDays) -> tuple[str, list[int | None]]:
    """A SQL expression over `findings_findingdue d` left-joined to the finding (and its
    parameters): the finding's due decision when its due date already is what
    `finding_due_dates_apply` would write for a rank of that decision under `policy` (a day
    since, and the due date that follows, unless set by hand); '' when it has a row
    settled for no decision; NULL when it has no row. A finding whose new decision equals
    the first needs no write, so a ranking run that read it can leave the finding out of
    the recomputation; one without a row can be inserted (`finding_due_dates_insert`)."""
    return (
        "CASE WHEN d.finding_id IS NULL THEN NULL "
        "WHEN d.since IS NOT NULL AND (d.manual OR "
        "d.due_date IS NOT DISTINCT FROM d.since + CASE d.decision "
        "WHEN 'immediate' THEN %s::integer WHEN 'out-of-cycle' THEN %s::integer "
        "WHEN 'scheduled' THEN %s::integer WHEN 'defer' THEN %s::integer END) "
        "THEN d.decision ELSE '' END",
        [policy.immediate_days, policy.out_of_cycle_days, policy.scheduled_days,
         policy.defer_days],
    )


def finding_due_dates_apply(
    *, team_id: int, today: date | None = None,
    run_id: int | None = None, finding_ids: list[int] | None = None,
    checked_policy: PolicyDays | None = None, ranked_table: str = "ranking_rankedfinding",
) -> int:
    """Recompute the team's due dates from the latest ranking decisions (the ranked rows of
    `ranked_table`: a ranking run's own new table before it swaps it in); returns the number of
    findings written. Idempotent: a second call with the same ranks writes nothing. It
    writes FindingDue rows only, never the findings (their updated_at stays what people and
    loads wrote, which is what incremental ranking runs read); `run_id` limits the work
    to the findings whose rank that run wrote (an incremental run: every other finding kept
    its decision, so its due date stands). `finding_ids` limits it to those findings: the
    caller checked every other ranked finding with `settled_decision_sql(checked_policy)`
    and found its decision settled; if the team's policy is no longer `checked_policy`,
    every finding is recomputed."""
    policy = triage_policy_for(team_id=team_id)
    if finding_ids is not None and policy != checked_policy:
        finding_ids = None
    with connection.cursor() as cur:
        cur.execute(
            _APPLY_SQL.format(ranked=ranked_table),
            {
                "team": team_id,
                "today": today or timezone.localdate(),
                "run": run_id,
                "ids": None if finding_ids is None else "{" + ",".join(map(str, finding_ids))
                + "}",
                "open": list(OPEN_STATES),
                "immediate": policy.immediate_days,
                "out_of_cycle": policy.out_of_cycle_days,
                "scheduled": policy.scheduled_days,
                "defer": policy.defer_days,
            },
        )
        return int(cur.rowcount)


def finding_due_dates_insert(
    *, team_id: int, decisions: Sequence[tuple[int, str]], checked_policy: PolicyDays,
    today: date | None = None,
) -> int | None:
    """The due dates of ranked findings that have none yet, given as (finding id, decision):
    a team's first ranking run gives one to every finding, and this writes them by one
    COPY (PostgreSQL stores a chunk while the next is formatted) instead of a join of the
    whole queue with the findings. Should someone have written a row meanwhile (a date set
    by hand), the COPY is undone and the rows go in by an upsert that keeps theirs.
    Returns the rows inserted, or None when the team's policy is no longer
    `checked_policy` (the caller recomputes every finding instead)."""
    policy = triage_policy_for(team_id=team_id)
    if policy != checked_policy:
        return None
    day = today or timezone.localdate()
    dues = {}
    for decision in DECISION_FIELDS:
        days = policy.days_for(decision)
        dues[decision] = r"\N" if days is None else (day + timedelta(days=days)).isoformat()
    head = f"\t{team_id}\t{day.isoformat()}\t"

    def copy_into(cur: Any, table: str) -> None:
        with cur.copy(f"COPY {table} (finding_id, team_id, since, decision, due_date, manual) "
                      "FROM STDIN") as copy:
            for i in range(0, len(decisions), 50_000):
                copy.write("".join(
                    f"{fid}{head}{decision}\t{dues[decision]}\tf\n"
                    for fid, decision in decisions[i : i + 50_000]
                ))

    with connection.cursor() as cur:
        try:
            with transaction.atomic():
                copy_into(cur, "findings_findingdue")
            inserted = len(decisions)
        except (IntegrityError, psycopg.IntegrityError):
            cur.execute(
                "CREATE TEMPORARY TABLE due_new (LIKE findings_findingdue) ON COMMIT DROP"
            )
            copy_into(cur, "due_new")
            cur.execute(
                "INSERT INTO findings_findingdue SELECT * FROM due_new ORDER BY finding_id "
                "ON CONFLICT (finding_id) DO NOTHING"
            )
            inserted = int(cur.rowcount)
            cur.execute("DROP TABLE due_new")
        if inserted >= ANALYZE_AFTER:
            # The planner must know the table grew before the findings pages join it: with
            # the statistics of the table before (empty, on a first run), it read every
            # due-date row once per row of a page (seconds), until autovacuum caught up.
            cur.execute("ANALYZE findings_findingdue")
    return inserted


# Rows inserted at once from which the due-date table's statistics are refreshed at once.
ANALYZE_AFTER = 50_000


def triage_policy_set(
    *, principal: Principal, team_id: int, values: dict[str, int | None]
) -> TriagePolicy:
    """Create or change the team's policy (the fields given), then recompute its due dates.
    Team admins only."""
    if not principal.can(Scope.ADMIN, team_id):
        raise TriageForbidden("changing the triage policy needs the 'admin' scope in this team")
    policy, _ = TriagePolicy.objects.get_or_create(team_id=team_id)
    for name in DECISION_FIELDS.values():
        if name in values:
            setattr(policy, name, values[name])
    policy.save()
    finding_due_dates_apply(team_id=team_id)
    return policy
