"""The source document's case, built in the database: a payment gateway on Log4j 2.14.1 that
the internet reaches and that logs on every request, and an etcd with a CVSS 9.8 flaw that
only listens on localhost."""

from __future__ import annotations

from datetime import date, timedelta

from django.utils import timezone

from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.accounts.principal import Principal
from trustrank.runtime.deployment import DeploymentRequest, deployment_set
from trustrank.runtime.models import (
    CallEdgeBucket,
    Environment,
    LibraryBucket,
    NodeKind,
    Service,
)
from trustrank.vulns.models import EpssLatest, KevEntry

LOG4J = ("log4j-core", "2.14.1", "pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1")
ETCD = ("go.etcd.io/etcd", "3.4.9", "pkg:golang/go.etcd.io/etcd@v3.4.9")
CVSS_10 = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"
CVSS_98 = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"


def build(team, *, env: str = "prod") -> dict[str, object]:
    import_osv(team, [
        osv("GHSA-jfh8-c2jp-5v3q", "Maven", "org.apache.logging.log4j:log4j-core",
            [{"introduced": "2.0-beta9"}, {"fixed": "2.15.0"}], aliases=["CVE-2021-44228"],
            severity=CVSS_10, summary="Remote code injection in Log4j"),
        osv("GO-2020-0005", "Go", "go.etcd.io/etcd",
            [{"introduced": "0"}, {"fixed": "3.4.10"}], aliases=["CVE-2020-15115"],
            severity=CVSS_98, range_type="SEMVER", summary="etcd flaw"),
    ])
    # Feeds are site-wide: a second team's build finds them there.
    KevEntry.objects.update_or_create(cve_id="CVE-2021-44228", defaults=dict(
        vendor_project="Apache", product="Log4j2", vulnerability_name="Log4Shell",
        date_added=date(2021, 12, 10)))
    EpssLatest.objects.update_or_create(cve_id="CVE-2021-44228", defaults=dict(
        score_date=date(2026, 11, 30), epss=0.944, percentile=0.9999))
    EpssLatest.objects.update_or_create(cve_id="CVE-2020-15115", defaults=dict(
        score_date=date(2026, 11, 30), epss=0.002, percentile=0.4))
    gw = load_sbom(team, bom([LOG4J]), project="payment-gateway", version="1.0")
    etcd = load_sbom(team, bom([ETCD]), project="etcd", version="3.4.9")
    from trustrank.vulns.services.exploit import findings_refresh_exploit_data

    findings_refresh_exploit_data()

    now = timezone.now().replace(second=0, microsecond=0)
    environment, _ = Environment.objects.get_or_create(
        team=team, name=env, defaults={"first_seen": now, "last_seen": now}
    )

    def node(name: str, kind: str = NodeKind.SERVICE, **extra) -> Service:
        return Service.objects.create(environment=environment, kind=kind, name=name,
                                      first_seen=now, last_seen=now, **extra)

    internet = node("internet", NodeKind.INTERNET)
    gateway = node("payment-gateway")
    etcd_svc = node("etcd")
    # etcd's only callers: its local agent (root spans from 127.0.0.1).
    LibraryBucket.objects.create(service=etcd_svc, bucket_start=now, kind="origin",
                                 name="local", spans=600)
    for minute in range(10):
        at = now - timedelta(minutes=minute)
        CallEdgeBucket.objects.create(environment=environment, caller=internet, callee=gateway,
                                      bucket_start=at, calls=120, last_seen=at)
        LibraryBucket.objects.create(service=gateway, bucket_start=at, kind="scope",
                                     name="io.opentelemetry.log4j-context-data-2.17", spans=120)
    principal = Principal(scopes_by_team={team.pk: frozenset({"sbom:write"})})
    deployment_set(team=team, environment=env, service="payment-gateway",
                   request=DeploymentRequest(project="payment-gateway", version="1.0",
                                             human_impact="high"),
                   source="api", principal=principal)
    deployment_set(team=team, environment=env, service="etcd",
                   request=DeploymentRequest(project="etcd", version="3.4.9"),
                   source="api", principal=principal)
    return {"gateway_pv": gw, "etcd_pv": etcd, "gateway": gateway, "etcd": etcd_svc}
