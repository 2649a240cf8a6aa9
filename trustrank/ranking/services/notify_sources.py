"""The events behind the notify batches that name a source (registered in RankingConfig.ready):
a ranking run's decision changes, and a KEV import's additions that hit a team's findings.
Read by the notify worker, never by the run or the import themselves.

Each event's payload names the finding, its rank, decision and explanation, the
vulnerability, component, project/version, service/environment and the finding's page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import F, Q

from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding
from trustrank.ranking.models import RankChange, RankedFinding, RankingRun
from trustrank.ranking.ranks import ranks_of

IMMEDIATE = "immediate"
_CHUNK = 2000


def _run_changes(run: RankingRun) -> list[tuple[int, str | None, str, int | None, float | None]]:
    """(finding id, previous decision or None, decision, rank, score) of every finding whose
    decision this run changed; a finding new to the queue counts only as it becomes
    immediate (and, on the team's first run, every finding is new)."""
    if run.previous_id is None:
        first = RankedFinding.objects.filter(
            team_id=run.team_id, run_id=run.pk, decision=IMMEDIATE
        ).values_list("finding_id", "decision", "rank", "score")
        return [(fid, None, decision, rank, score) for fid, decision, rank, score in first]
    rows = (
        RankChange.objects.filter(run_id=run.pk).exclude(decision="")
        .exclude(decision=F("previous_decision"))
        .values_list("finding_id", "previous_decision", "decision", "rank", "score")
    )
    return [
        (fid, previous or None, decision, rank, score)
        for fid, previous, decision, rank, score in rows
        if previous or decision == IMMEDIATE
    ]


def finding_payloads(finding_ids: list[int]) -> dict[int, dict[str, Any]]:
    """What every event about a finding says of it (its current rank and explanation)."""
    out: dict[int, dict[str, Any]] = {}
    site = settings.TRUSTRANK_SITE_URL
    for start in range(0, len(finding_ids), _CHUNK):
        ids = finding_ids[start : start + _CHUNK]
        # The current ranks, counted from the keys (the stored ones are as of the run
        # that last wrote each row): one statement a chunk.
        counted = ranks_of(ids)
        ranked = {
            fid: (counted[fid][0] if fid in counted else None, score, decision, data)
            for fid, score, decision, data in RankedFinding.objects.filter(
                finding_id__in=ids
            ).values_list("finding_id", "score", "decision", "context__data")
        }
        for f in Finding.objects.filter(pk__in=ids).values(
            "pk", "title", "kind", "vuln_id", "cve_id", "component_name", "component_version",
            "component_purl", "project__name", "project_version__version", "service__name",
            "environment", "severity", "state",
        ):
            rank, score, decision, data = ranked.get(f["pk"], (None, None, "", None))
            data = data or {}
            component = f["component_name"]
            if component and f["component_version"]:
                component = f"{component}@{f['component_version']}"
            out[f["pk"]] = {
                "finding_id": f["pk"],
                "finding_url": f"{site}/findings/{f['pk']}/",
                "title": f["title"],
                "kind": f["kind"],
                "vuln_id": f["vuln_id"],
                "cve_id": f["cve_id"],
                "component": component,
                "component_name": f["component_name"],
                "component_version": f["component_version"],
                "component_purl": f["component_purl"],
                "project": f["project__name"] or "",
                "version": f["project_version__version"] or "",
                "project_version": f["project_version__version"] or "",
                "service": f["service__name"] or data.get("service") or "",
                "environment": f["environment"] or data.get("environment") or "",
                "severity": f["severity"],
                "state": f["state"],
                "rank": rank,
                "score": score,
                "decision": decision,
                "explanation": data.get("explanation", []),
            }
    return out


def with_finding(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with its `finding` object: the finding's facts in one place, as the Jira
    delivery reads them (there `component` is the name and `version` the component's version;
    the project's version is `project_version`)."""
    finding = {
        "id": payload["finding_id"], "url": payload["finding_url"],
        **{k: payload.get(k) for k in (
            "title", "kind", "vuln_id", "cve_id", "component_purl", "project",
            "project_version", "service", "environment", "severity", "state", "rank", "score",
            "decision", "previous_decision", "explanation")},
        "component": payload.get("component_name") or payload.get("component"),
        "version": payload.get("component_version", ""),
    }
    return {**payload, "finding": finding}


def _team_block(team_id: int) -> dict[str, Any]:
    from trustrank.accounts.models import Team

    name = Team.objects.filter(pk=team_id).values_list("name", flat=True).first()
    return {"id": team_id, "name": name or ""}


def ranking_run_events(*, batch: Any) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """`finding.decision_changed` for each decision the run changed, and also
    `finding.immediate` for each that became immediate."""
    run = RankingRun.objects.filter(pk=batch.ref_id).first()
    if run is None:
        return
    changes = _run_changes(run)
    facts = finding_payloads([c[0] for c in changes])
    team = _team_block(run.team_id)
    occurred = (run.finished_at or batch.created_at).isoformat()
    for fid, previous, decision, rank, score in changes:
        finding = facts.get(fid)
        if finding is None:
            continue  # deleted since
        payload = {
            **finding, "team": team, "occurred_at": occurred, "ranking_run": run.pk,
            "rank": rank if rank is not None else finding["rank"],
            "score": score if score is not None else finding["score"],
            "decision": decision, "previous_decision": previous,
        }
        payload = with_finding(payload)
        yield run.team_id, "finding.decision_changed", payload
        if decision == IMMEDIATE:
            yield run.team_id, "finding.immediate", payload


def kev_added_events(*, batch: Any) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """`feed.kev_added` for each open finding (of any team) of a CVE the KEV import added."""
    cves = [str(c) for c in batch.items]
    hits = list(
        Finding.objects.filter(
            Q(cve_id__in=cves) | Q(vuln_id__in=cves) | Q(aliases__overlap=cves),
            state__in=OPEN_STATES,
        ).values_list("pk", "team_id", "cve_id", "vuln_id", "aliases")
    )
    facts = finding_payloads([h[0] for h in hits])
    teams: dict[int, dict[str, Any]] = {}
    occurred = batch.created_at.isoformat()
    wanted = set(cves)
    for fid, team_id, cve_id, vuln_id, aliases in hits:
        finding = facts.get(fid)
        if finding is None:
            continue
        if team_id not in teams:
            teams[team_id] = _team_block(team_id)
        kev = next((c for c in (cve_id, vuln_id, *(aliases or [])) if c in wanted), cve_id)
        yield team_id, "feed.kev_added", with_finding({
            **finding, "team": teams[team_id], "occurred_at": occurred, "kev_cve_id": kev,
        })
