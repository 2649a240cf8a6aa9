"""A shop whose versions carry Log4Shell and Spring4Shell (both in CISA KEV, network
automatable), deployed on services that send no traces (exposure read as open): with human
impact high their decision is immediate, with medium out-of-cycle."""

from __future__ import annotations

from datetime import date

from tests.ranking.scenario import CVSS_10, CVSS_98, LOG4J
from tests.vulns.helpers import import_osv, osv
from trustrank.accounts.principal import Principal
from trustrank.ranking.models import RankingRun
from trustrank.ranking.services.requests import ranking_run_request
from trustrank.ranking.services.runs import ranking_run_execute
from trustrank.runtime.deployment import DeploymentRequest, deployment_set
from trustrank.vulns.models import KevEntry

SPRING = ("spring-beans", "5.3.17", "pkg:maven/org.springframework/spring-beans@5.3.17")
LOG4SHELL = "CVE-2021-44228"
SPRING4SHELL = "CVE-2022-22965"


def advisories(team) -> None:
    import_osv(team, [
        osv("GHSA-jfh8-c2jp-5v3q", "Maven", "org.apache.logging.log4j:log4j-core",
            [{"introduced": "2.0-beta9"}, {"fixed": "2.15.0"}], aliases=[LOG4SHELL],
            severity=CVSS_10, summary="Remote code injection in Log4j"),
        osv("GHSA-36p3-wjmg-h94x", "Maven", "org.springframework:spring-beans",
            [{"introduced": "0"}, {"fixed": "5.3.18"}], aliases=[SPRING4SHELL],
            severity=CVSS_98, summary="Remote code execution in Spring Framework"),
    ])
    KevEntry.objects.create(cve_id=LOG4SHELL, vendor_project="Apache", product="Log4j2",
                            vulnerability_name="Log4Shell", date_added=date(2021, 12, 10))
    KevEntry.objects.create(cve_id=SPRING4SHELL, vendor_project="VMware",
                            product="Spring Framework", vulnerability_name="Spring4Shell",
                            date_added=date(2022, 4, 4))


def deploy(team, *, service: str, project: str, version: str, impact: str = "high") -> None:
    deployment_set(
        team=team, environment="prod", service=service,
        request=DeploymentRequest(project=project, version=version, human_impact=impact),
        source="api", principal=Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})}),
    )


def rerank(team) -> RankingRun:
    run = ranking_run_request(team_id=team.pk, trigger="test", delay_seconds=0)
    assert ranking_run_execute(run_id=run.pk) == "done", RankingRun.objects.get(pk=run.pk).error
    run.refresh_from_db()
    return run


__all__ = ["LOG4J", "SPRING", "advisories", "deploy", "rerank"]
