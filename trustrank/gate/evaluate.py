"""The gate's verdict on one project version: its vulnerability findings, their triage state
(waivers) and the SSVC decisions of the latest ranking run, judged by the team's policy.

Reads only; `gate_answer` may wait (polling, with no connection held between polls) until the
ranking has caught up with the version's latest upload (trustrank.gate.readiness)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from trustrank.findings.choices import OPEN_STATES, FindingKind, TriageState
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.gate.models import FAILING_DECISIONS, GatePolicy
from trustrank.gate.readiness import Progress, Upload, gate_progress
from trustrank.gate.selectors import GateTarget, gate_policy_for
from trustrank.inventory.models import ProjectVersion
from trustrank.jobs.models import JobStatus
from trustrank.ranking.models import RankingRun
from trustrank.ranking.ranks import ranks_of
from trustrank.runtime.models import Deployment

DECISIONS = ("immediate", "out-of-cycle", "scheduled", "defer")
# Triage states that waive a finding: a person (or the SBOM's own VEX analysis) said it does
# not apply or is dealt with. "Accepted risk" is CycloneDX's exploitable + will_not_fix.
WAIVING_STATES = (
    TriageState.NOT_AFFECTED,
    TriageState.FALSE_POSITIVE,
    TriageState.RESOLVED,
    TriageState.RESOLVED_WITH_PEDIGREE,
)
ACCEPTED_RISK_RESPONSE = "will_not_fix"

# Polling while waiting: start quick (the ranking is often nearly done), then every half second.
POLL_FIRST_SECONDS = 0.25
POLL_SECONDS = 0.5


@dataclass
class GateFinding:
    finding_id: int
    vuln_id: str
    component: str
    component_version: str
    decision: str  # '' when no run has ranked it
    rank: int | None
    score: float | None
    state: str
    new: bool | None = None  # None unless the policy looks at new findings only
    waiver: str = ""  # why it does not count ('' when it does)

    @property
    def label(self) -> str:
        at = f"@{self.component_version}" if self.component_version else ""
        return f"{self.vuln_id or f'finding {self.finding_id}'} in {self.component}{at}"

    def as_json(self) -> dict[str, Any]:
        return {
            "finding": self.finding_id,
            "vuln_id": self.vuln_id,
            "component": self.component,
            "component_version": self.component_version,
            "decision": self.decision or None,
            "rank": self.rank,
            "score": self.score,
            "state": self.state,
            **({"new": self.new} if self.new is not None else {}),
            **({"waiver": self.waiver} if self.waiver else {}),
        }


@dataclass
class GateResult:
    """One answer of the gate. `passed` is never true while `pending`."""

    passed: bool
    pending: bool
    reasons: list[str]
    counts: dict[str, int]
    team_id: int
    team: str
    project: str
    version: str
    project_uuid: str | None
    project_version_id: int | None
    environment: str | None
    policy: dict[str, Any]
    deployed_in_environment: bool | None = None
    ranking_run_id: int | None = None
    ranked_at: datetime | None = None
    upload: Upload | None = None
    previous_version: str | None = None
    new_counts: dict[str, int] | None = None
    failing: list[GateFinding] = field(default_factory=list)
    waived: list[GateFinding] = field(default_factory=list)
    unranked: int = 0
    # Findings that would fail but were in the previous version (policy: new only).
    not_new_failing: int = 0
    # What the verdict would be on what is known so far (only while pending).
    provisional_pass: bool | None = None
    waiting_for: str = ""
    waited_seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "pass": self.passed,
            "pending": self.pending,
            "reasons": self.reasons,
            "counts": self.counts,
            "team": self.team,
            "project": self.project,
            "version": self.version,
            "project_uuid": self.project_uuid,
            "environment": self.environment,
            "deployed_in_environment": self.deployed_in_environment,
            "policy": self.policy,
            "ranking_run": self.ranking_run_id,
            "ranked_at": self.ranked_at.isoformat() if self.ranked_at else None,
            "upload": self.upload.as_json() if self.upload else None,
            "failing": [f.as_json() for f in self.failing],
            "waived": [f.as_json() for f in self.waived],
            "unranked": self.unranked,
            "waited_seconds": round(self.waited_seconds, 2),
        }
        if self.policy.get("new_only"):
            body["previous_version"] = self.previous_version
            body["new_counts"] = self.new_counts
        if self.pending:
            body["provisional_pass"] = self.provisional_pass
            body["waiting_for"] = self.waiting_for
        return body


def policy_json(policy: GatePolicy) -> dict[str, Any]:
    return {"fail_on": policy.fail_on, "new_only": policy.new_only}


def previous_version_of(pv: ProjectVersion) -> ProjectVersion | None:
    """The project's version uploaded before this one: first uploaded (created) last before
    it; a tie in time goes by id."""
    return (
        ProjectVersion.objects.filter(project_id=pv.project_id)
        .exclude(pk=pv.pk)
        .filter(created_at__lte=pv.created_at)
        .exclude(created_at=pv.created_at, pk__gt=pv.pk)
        .order_by("-created_at", "-id")
        .first()
    )


def _ids(vuln_id: str, cve_id: str, aliases: list[str] | None) -> set[str]:
    return {i.upper() for i in (vuln_id, cve_id, *(aliases or ())) if i}


def _known_pairs(pv: ProjectVersion) -> dict[str, set[str]]:
    """component name -> every vulnerability id (aliases included) the version had."""
    pairs: dict[str, set[str]] = {}
    for name, vuln_id, cve_id, aliases in Finding.objects.filter(
        project_version=pv, kind=FindingKind.VULNERABILITY
    ).values_list("component_name", "vuln_id", "cve_id", "aliases"):
        pairs.setdefault(name, set()).update(_ids(vuln_id, cve_id, aliases))
    return pairs


def _waiver_sources(ids: list[int]) -> dict[int, str]:
    """finding id -> who set its current state, when and why (its latest audit event that
    set a state: a person's triage, a bulk triage, or the SBOM's VEX analysis at creation)."""
    if not ids:
        return {}
    rows = (
        AuditEvent.objects.filter(finding_id__in=ids, after__has_key="state")
        .order_by("finding_id", "-created_at", "-id")
        .distinct("finding_id")
        .values("finding_id", "action", "actor_label", "created_at", "reason")
    )
    out = {}
    for r in rows:
        how = "the SBOM's VEX analysis" if r["action"] == "created" else r["actor_label"]
        text = f"by {how} on {r['created_at']:%Y-%m-%d}"
        if r["reason"]:
            text += f": {' '.join(r['reason'].split())[:200]}"
        out[r["finding_id"]] = text
    return out


def _waiver(f: Finding) -> str:
    if f.state in WAIVING_STATES:
        return f.state + (f" ({f.justification})" if f.justification else "")
    if f.state == TriageState.EXPLOITABLE and ACCEPTED_RISK_RESPONSE in (f.response or []):
        return "accepted risk (exploitable, will_not_fix)"
    return ""


def _latest_run(team_id: int) -> RankingRun | None:
    return (
        RankingRun.objects.filter(team_id=team_id, status=JobStatus.DONE)
        .order_by("-finished_at", "-id")
        .only("pk", "finished_at")
        .first()
    )


def gate_evaluate(
    *, target: GateTarget, environment: str | None, progress: Progress, waited: float = 0.0,
    wait: float | None = None,
) -> GateResult:
    """The verdict on what the database holds now (a handful of queries, whatever the size)."""
    team = target.team
    policy = gate_policy_for(team_id=team.pk)
    pv = target.project_version
    result = GateResult(
        passed=False, pending=not progress.ready, reasons=[],
        counts=dict.fromkeys(DECISIONS, 0), team_id=team.pk, team=team.name,
        project=target.project, version=target.version,
        project_uuid=str(pv.uuid) if pv else None, project_version_id=pv.pk if pv else None,
        environment=environment, policy=policy_json(policy), upload=progress.upload,
        waiting_for=progress.waiting_for, waited_seconds=waited,
    )
    run = _latest_run(team.pk)
    if run is not None:
        result.ranking_run_id, result.ranked_at = run.pk, run.finished_at
    failing_decisions = FAILING_DECISIONS[policy.fail_on]
    if pv is not None:
        _judge(result, pv=pv, policy=policy, failing_decisions=failing_decisions)
        if environment is not None:
            result.deployed_in_environment = Deployment.objects.filter(
                project_version=pv, environment__team_id=team.pk, environment__name=environment
            ).exists()
    _conclude(result, progress=progress, failing_decisions=failing_decisions, wait=wait)
    return result


def _judge(
    result: GateResult, *, pv: ProjectVersion, policy: GatePolicy,
    failing_decisions: tuple[str, ...],
) -> None:
    findings = list(
        Finding.objects.filter(project_version=pv, kind=FindingKind.VULNERABILITY)
        .select_related("ranked", "due")
        .only(
            "pk", "vuln_id", "cve_id", "aliases", "component_name", "component_version",
            "state", "justification", "response", "auto_resolved",
            "ranked__qkey", "ranked__score", "ranked__decision", "due__decision",
        )
        .order_by("pk")
    )
    known: dict[str, set[str]] | None = None
    if policy.new_only:
        previous = previous_version_of(pv)
        result.previous_version = previous.version if previous else None
        known = _known_pairs(previous) if previous else {}
        result.new_counts = dict.fromkeys(DECISIONS, 0)
    for f in findings:
        if f.auto_resolved and f.state not in OPEN_STATES:
            continue  # the evidence went away (component removed, advisory withdrawn)
        ranked = f.ranked_or_none
        due = f.due_or_none
        decision = ranked.decision if ranked else (due.decision if due else "")
        g = GateFinding(
            finding_id=f.pk, vuln_id=f.vuln_id, component=f.component_name,
            component_version=f.component_version, decision=decision,
            rank=None, score=ranked.score if ranked else None,
            state=f.state, waiver=_waiver(f),
        )
        if known is not None:
            g.new = not (_ids(f.vuln_id, f.cve_id, f.aliases) & known.get(f.component_name, set()))
        if g.waiver:
            result.waived.append(g)
            continue
        if f.state not in OPEN_STATES:
            continue
        if ranked is None:
            result.unranked += 1
            continue
        result.counts[g.decision] = result.counts.get(g.decision, 0) + 1
        if g.new and result.new_counts is not None:
            result.new_counts[g.decision] = result.new_counts.get(g.decision, 0) + 1
        if g.decision in failing_decisions:
            if g.new is False:
                result.not_new_failing += 1
            else:
                result.failing.append(g)
    # The stored rank is the one of the run that last wrote the row: count it from the key,
    # for the findings the verdict lists (a version's, a few hundred at most).
    ranks = ranks_of(g.finding_id for g in [*result.failing, *result.waived])
    for g in [*result.failing, *result.waived]:
        g.rank = ranks[g.finding_id][0] if g.finding_id in ranks else None
    result.failing.sort(key=lambda g: (g.rank or 0, g.finding_id))
    sources = _waiver_sources([g.finding_id for g in result.waived])
    for g in result.waived:
        if sources.get(g.finding_id):
            g.waiver = f"{g.waiver} {sources[g.finding_id]}"


def _rank_text(g: GateFinding) -> str:
    parts = [f"rank {g.rank}"] if g.rank is not None else []
    if g.score is not None:
        parts.append(f"score {g.score:g}")
    return f" ({', '.join(parts)})" if parts else ""


def _conclude(
    result: GateResult, *, progress: Progress, failing_decisions: tuple[str, ...],
    wait: float | None,
) -> None:
    reasons = result.reasons
    upload = progress.upload
    upload_failed = bool(progress.ready and upload and upload.status == JobStatus.FAILED)
    if upload_failed and upload is not None:
        reasons.append(f"the latest SBOM upload (job {upload.job_id}) failed: {upload.error}")
    new_note = ""
    if result.policy["new_only"]:
        new_note = (
            f", new since {result.previous_version}" if result.previous_version
            else ", new (no previous version)"
        )
    for g in result.failing:
        reasons.append(f"{g.label} is {g.decision}{_rank_text(g)}{new_note}")
    for g in result.waived:
        if g.decision in failing_decisions or not g.decision:
            was = f" ({g.decision})" if g.decision else ""
            reasons.append(f"{g.label}{was} waived: {g.waiver}")
    if result.policy["new_only"]:
        old = result.not_new_failing
        if old:
            reasons.append(
                f"{old} open {' or '.join(failing_decisions)} finding(s) were already in "
                f"{result.previous_version} and do not fail the gate (policy: new findings only)"
            )
    verdict = not result.failing and not upload_failed
    if result.pending:
        result.provisional_pass = verdict
        result.passed = False
        within = f" within {wait:g} s" if wait else ""
        reasons.insert(0, f"ranking not finished{within}: {progress.waiting_for}")
        return
    result.passed = verdict
    if verdict:
        scope = "new open finding" if result.policy["new_only"] else "open finding"
        reasons.insert(0, f"no {scope} is {' or '.join(failing_decisions)}")


def gate_answer(
    *, target_find: Any, environment: str | None, wait: float,
    sleep: Any = time.sleep, clock: Any = time.monotonic,
) -> GateResult:
    """Find the target (`target_find()`, which may raise GateNotFound), wait up to `wait`
    seconds until the ranking has caught up with its latest upload, and judge.

    Between polls the database connection is closed: a request held for minutes must not hold
    a PostgreSQL session all that time. No transaction is open (the API's requests are not
    atomic), so each poll reads what has been committed since the last."""
    start = clock()
    deadline = start + wait
    interval = POLL_FIRST_SECONDS
    while True:
        target: GateTarget = target_find()
        progress = gate_progress(target)
        remaining = deadline - clock()
        if progress.ready or remaining <= 0:
            break
        if not connection.in_atomic_block:  # (a test's transaction keeps its connection)
            connection.close()
        sleep(min(interval, remaining))
        interval = POLL_SECONDS
    return gate_evaluate(
        target=target, environment=environment, progress=progress,
        waited=clock() - start, wait=wait if wait > 0 else None,
    )
