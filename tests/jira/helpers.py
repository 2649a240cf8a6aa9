"""A finding and the event JSON the webhooks' worker hands to jira_deliver about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trustrank.findings.models import Finding


@dataclass
class Webhook:
    """The attributes jira_deliver reads of a webhook (trustrank/notify's model)."""

    team_id: int
    url: str
    secret: str = ""
    jira_project_key: str = ""
    jira_user: str = ""
    pk: int = 7


def log4j_finding(team: Any, *, fingerprint: str = "log4j") -> Finding:
    return Finding.objects.create(
        team=team, kind="vulnerability", source="osv", fingerprint=fingerprint,
        title="Remote code injection in Log4j", severity="critical", severity_score=10.0,
        vuln_id="CVE-2021-44228", cve_id="CVE-2021-44228", component_name="log4j-core",
        component_version="2.14.1", package_name="org.apache.logging.log4j:log4j-core",
        ecosystem="Maven", environment="prod",
    )


def event_payload(finding: Finding, *, event: str = "finding.immediate",
                  decision: str = "immediate", rank: int = 1) -> dict[str, Any]:
    return {
        "event": event,
        "finding": {
            "id": finding.pk,
            "vuln_id": finding.vuln_id,
            "title": finding.title,
            "component": finding.component_name,
            "version": finding.component_version,
            "project": "shop",
            "project_version": "1.4.0",
            "service": "checkout",
            "environment": "prod",
            "rank": rank,
            "decision": decision,
            "score": 97.5,
            "explanation": [
                {"name": "exposure", "value": "open", "effect": 20.0,
                 "source": "ingress path internet -> checkout", "confidence": "high"},
                {"name": "kev", "value": True, "effect": 15.0, "source": "CISA KEV",
                 "confidence": "high"},
            ],
            "url": f"https://trustrank.example/findings/{finding.pk}/",
        },
    }
