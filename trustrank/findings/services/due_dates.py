"""Due dates from the ranking decision, by the team's TriagePolicy.

A finding's due date is the day it first got its current decision plus the policy's days for
that decision (no days: no due date). A ranking run calls `finding_due_dates_apply` at its end;
one set-based UPDATE records each ranked open finding's decision and the day it got it, and
recomputes the due date of every finding whose date no person set by hand. A finding whose due
date moves gets a new version, like any other change to its triage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from django.db import connection
from django.utils import timezone

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.models import OPEN_STATES, TriagePolicy
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
           CASE WHEN f.due_decision = r.decision AND f.due_decision_since IS NOT NULL
                THEN f.due_decision_since ELSE %(today)s::date END AS since,
           CASE r.decision
                WHEN 'immediate' THEN %(immediate)s::integer
                WHEN 'out-of-cycle' THEN %(out_of_cycle)s::integer
                WHEN 'scheduled' THEN %(scheduled)s::integer
                WHEN 'defer' THEN %(defer)s::integer
           END AS days
    FROM ranking_rankedfinding r
    JOIN findings_finding f ON f.id = r.finding_id
    WHERE r.team_id = %(team)s AND f.team_id = %(team)s AND f.state = ANY(%(open)s)
      AND (%(run)s::bigint IS NULL OR r.run_id = %(run)s::bigint)
      AND (%(ids)s::bigint[] IS NULL OR r.finding_id = ANY(%(ids)s::bigint[]))
), d AS (
    SELECT finding_id, decision, since, since + days AS due FROM c
), todo AS (
    -- Only the rows that change, locked in id order as bulk triage and reconciliation lock
    -- theirs, so the three never deadlock.
    SELECT f.id, d.decision, d.since, d.due
    FROM findings_finding f JOIN d ON d.finding_id = f.id
    WHERE f.due_decision IS DISTINCT FROM d.decision
       OR f.due_decision_since IS DISTINCT FROM d.since
       OR (NOT f.due_date_manual AND f.due_date IS DISTINCT FROM d.due)
    ORDER BY f.id
    FOR UPDATE OF f
)
UPDATE findings_finding f SET
    due_decision = t.decision,
    due_decision_since = t.since,
    due_date = CASE WHEN f.due_date_manual THEN f.due_date ELSE t.due END,
    version = f.version + CASE
        WHEN NOT f.due_date_manual AND f.due_date IS DISTINCT FROM t.due THEN 1 ELSE 0 END,
    updated_at = CASE
        WHEN NOT f.due_date_manual AND f.due_date IS DISTINCT FROM t.due THEN %(now)s
        ELSE f.updated_at END
FROM todo t
WHERE f.id = t.id
"""


def settled_decision_sql(policy: PolicyDays) -> tuple[str, list[int | None]]:
    """A SQL expression over `findings_finding f` (and its parameters): the finding's
    `due_decision` when its due fields already are what `finding_due_dates_apply` would
    write for a rank of that decision under `policy` (a day since, and the due date that
    follows, unless set by hand); else NULL. A finding whose new decision equals it needs
    no write, so a ranking run that read it can leave the finding out of the recomputation."""
    return (
        "CASE WHEN f.due_decision_since IS NOT NULL AND (f.due_date_manual OR "
        "f.due_date IS NOT DISTINCT FROM f.due_decision_since + CASE f.due_decision "
        "WHEN 'immediate' THEN %s::integer WHEN 'out-of-cycle' THEN %s::integer "
        "WHEN 'scheduled' THEN %s::integer WHEN 'defer' THEN %s::integer END) "
        "THEN f.due_decision END",
        [policy.immediate_days, policy.out_of_cycle_days, policy.scheduled_days,
         policy.defer_days],
    )


def finding_due_dates_apply(
    *, team_id: int, today: date | None = None, now: datetime | None = None,
    run_id: int | None = None, finding_ids: list[int] | None = None,
    checked_policy: PolicyDays | None = None,
) -> int:
    """Recompute the team's due dates from the latest ranking decisions; returns the number of
    findings written. Idempotent: a second call with the same ranks writes nothing. `now` is
    the updated_at the written findings get (a ranking run passes it so that its next,
    incremental run can tell its own writes from everyone else's); `run_id` limits the work
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
            _APPLY_SQL,
            {
                "team": team_id,
                "today": today or timezone.localdate(),
                "now": now or timezone.now(),
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
