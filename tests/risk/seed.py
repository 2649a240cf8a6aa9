"""The source document's own case as engine inputs: an internet-facing shop whose payment
gateway runs Log4j 2.14.1 on every request, and an etcd that listens only on localhost."""

from __future__ import annotations

from datetime import date

from trustrank.risk import (
    CallEdge,
    Component,
    Deployment,
    Finding,
    ObservedComponent,
    ProjectVersion,
    RankInputs,
    RootSpanOrigin,
    Service,
    ServiceLibraries,
)

ENV = "prod"
LOG4J = "pkg:maven/org.apache.logging.log4j/log4j-core"
ETCD = "pkg:golang/go.etcd.io/etcd/server/v3"
AUTOMATABLE_V3 = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"


def seed_inputs(*, extra_findings: tuple[Finding, ...] = ()) -> RankInputs:
    services = (
        Service(environment=ENV, name="frontend", ingress_candidate=True, identity_strength=90,
                identity="spiffe://shop/frontend"),
        Service(environment=ENV, name="payment-gateway"),
        Service(environment=ENV, name="orders", identity_strength=100,
                identity="spiffe://shop/orders"),
        Service(environment=ENV, name="etcd"),
    )
    edges = (
        CallEdge(environment=ENV, caller="frontend", callee="payment-gateway",
                 calls_per_minute=600, mtls_share=1.0, sig=100),
        CallEdge(environment=ENV, caller="frontend", callee="orders", calls_per_minute=300,
                 mtls_share=1.0, sig=100),
    )
    origins = (
        RootSpanOrigin(environment=ENV, service="frontend", address_class="internet",
                       spans=5000, example_address="203.0.113.7"),
        RootSpanOrigin(environment=ENV, service="etcd", address_class="local", spans=40,
                       example_address="127.0.0.1"),
    )
    deployments = (
        Deployment(environment=ENV, service="frontend", project_version="frontend@3.2",
                   human_impact="medium", source="sbom"),
        Deployment(environment=ENV, service="payment-gateway", project_version="gateway@1.4",
                   human_impact="high", source="sbom"),
        Deployment(environment=ENV, service="orders", project_version="orders@2.0",
                   source="sbom"),
        Deployment(environment=ENV, service="etcd", project_version="etcd@3.4.13",
                   source="operator"),
    )
    versions = (ProjectVersion(key="gateway@1.4", sbom_signed=True),)
    components = (
        Component(project_version="gateway@1.4", key=LOG4J, hashes_present=True,
                  supplier_known=True),
        Component(project_version="etcd@3.4.13", key=ETCD),
    )
    libraries = (
        ServiceLibraries(environment=ENV, service="payment-gateway", traced=True, observed=(
            ObservedComponent(component_key=LOG4J, calls_per_minute=600,
                              evidence="scope io.opentelemetry.log4j-context-data-2.17"),
        )),
        ServiceLibraries(environment=ENV, service="frontend", traced=True),
        ServiceLibraries(environment=ENV, service="etcd", traced=True),
    )
    findings = (
        Finding(id="log4shell", vuln_id="CVE-2021-44228", severity="critical", cvss_score=10.0,
                cvss_vector="CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", in_kev=True,
                kev_date=date(2021, 12, 10), epss=0.94, epss_percentile=0.999,
                epss_date=date(2026, 11, 30), project_version="gateway@1.4",
                component_key=LOG4J, baseline=100.0),
        Finding(id="etcd-flaw", vuln_id="CVE-2020-15106", severity="critical", cvss_score=9.8,
                cvss_vector=AUTOMATABLE_V3, epss=0.004, epss_date=date(2026, 11, 30),
                project_version="etcd@3.4.13", component_key=ETCD, baseline=59.0),
        Finding(id="orders-medium", vuln_id="CVE-2099-0001", severity="medium", cvss_score=5.3,
                cvss_vector="CVSS:3.1/AV:N/AC:H/PR:L/UI:N/S:U/C:L/I:N/A:N", epss=0.02,
                project_version="orders@2.0", component_key="pkg:pypi/requests", baseline=32.0),
        Finding(id="frontend-high", vuln_id="CVE-2099-0002", severity="high", cvss_score=7.5,
                cvss_vector=AUTOMATABLE_V3, epss=0.03, project_version="frontend@3.2",
                component_key="pkg:npm/express", baseline=46.0),
        *extra_findings,
    )
    return RankInputs(services=services, edges=edges, origins=origins, deployments=deployments,
                      project_versions=versions, components=components, libraries=libraries,
                      findings=findings)
