"""Issue 24, end to end: an SBOM uploaded over HTTP, OTLP spans whose `code.namespace` names
a Spring Boot error controller and an H2 JDBC class, a real Celery worker, a ranking run.
H2 is observed (through the package its SBOM component lists); spring-webmvc is *not* —
the Spring Boot class names spring-boot-autoconfigure, not the whole Spring group."""

from __future__ import annotations

import orjson
import pytest
import requests
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from tests.ranking.scenario import CVSS_98
from tests.runtime.helpers import SpanFactory
from tests.vulns.helpers import import_osv, osv
from trustrank.findings.models import Finding

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

H2_CLASS = "org.h2.jdbc.JdbcConnection"
ERROR_CONTROLLER = ("org.springframework.boot.autoconfigure.web.servlet.error."
                    "BasicErrorController")


def _sbom() -> bytes:
    def comp(group, name, version, **extra):
        purl = f"pkg:maven/{group}/{name}@{version}"
        return {"type": "library", "group": group, "name": name, "version": version,
                "purl": purl, "bom-ref": purl, **extra}

    return orjson.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
                         "components": [
        comp("com.h2database", "h2", "1.4.200",
             properties=[{"name": "Namespaces", "value": f"{H2_CLASS}\norg.h2.Driver"}]),
        comp("org.springframework", "spring-webmvc", "5.3.17"),
        comp("org.springframework", "spring-core", "5.3.17"),
        comp("org.springframework.boot", "spring-boot-autoconfigure", "2.6.5"),
    ]})


def _export(service: str) -> bytes:
    f = SpanFactory(env="prod")
    resource = f.resource(service)
    for i, namespace in enumerate([H2_CLASS] * 20 + [ERROR_CONTROLLER] * 10):
        f.span(service=service, name="GET /orders", kind=SpanKind.SERVER, trace_id=f.trace_id(),
               start_offset_ms=-i * 10, resource=resource, scope=("com.shop", "1.0"),
               attributes={"client.address": "93.184.216.34", "code.namespace": namespace})
    return f.body()


def test_code_namespaces_mark_the_artifact_they_name_and_no_other(
    web_server, celery_worker, team, make_key
):
    import_osv(team, [
        osv("GHSA-h376-j262-vhq6", "Maven", "com.h2database:h2",
            [{"introduced": "1.1.100"}, {"fixed": "2.0.206"}], aliases=["CVE-2021-42392"],
            severity=CVSS_98, summary="H2 console JNDI"),
        osv("GHSA-36p3-wjmg-h94x", "Maven", "org.springframework:spring-webmvc",
            [{"introduced": "5.3.0"}, {"fixed": "5.3.18"}], aliases=["CVE-2022-22965"],
            severity=CVSS_98, summary="Spring4Shell"),
    ])
    key = make_key(team, "traces:write", "sbom:write", "read", "triage")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {key}"
    url = web_server.url
    r = http.post(f"{url}/api/v1/sboms?projectName=shop&projectVersion=1.0&autoCreate=true",
                  data=_sbom(), headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 202, r.text

    def jobs_done(kind):
        jobs = list(IngestJob.objects.filter(kind=kind))
        assert not [j.error for j in jobs if j.status == JobStatus.FAILED]
        return jobs and all(j.status == JobStatus.DONE for j in jobs)

    wait_for(lambda: jobs_done("sbom"), timeout=120)
    r = http.put(f"{url}/api/v1/environments/prod/services/shop/deployment",
                 json={"project": "shop", "version": "1.0"}, timeout=30)
    assert r.status_code == 200, r.text
    r = http.post(f"{url}/v1/traces", data=_export("shop"),
                  headers={"Content-Type": "application/x-protobuf"}, timeout=30)
    assert r.status_code == 200, r.text
    wait_for(lambda: jobs_done("traces"), timeout=120)
    wait_for(lambda: Finding.objects.filter(team=team).count() == 2, timeout=120)

    r = http.post(f"{url}/api/v1/ranking-runs", json={}, timeout=30)
    assert r.status_code == 202, r.text
    status_url = f"{url}{r.json()['status_url']}"

    def run_done():
        body = http.get(status_url, timeout=30).json()
        assert body["status"] != "failed", body.get("error")
        return body["status"] == "done"

    wait_for(run_done, timeout=180, interval=0.5)
    queue = http.get(f"{url}/api/v1/priorities?environment=prod", timeout=30).json()["results"]
    by_cve = {q["vuln_id"]: q for q in queue}
    h2 = by_cve["CVE-2021-42392"]
    reach = {f["name"]: f for f in h2["explanation"]}["reachability"]
    assert h2["reachability"] == "observed" and reach["value"] == "observed"
    assert reach["source"].startswith(
        f"code.namespace {H2_CLASS} (package org.h2 listed in the SBOM) on prod/shop, "
        "called "), reach
    webmvc = by_cve["CVE-2022-22965"]
    reach = {f["name"]: f for f in webmvc["explanation"]}["reachability"]
    # The Spring Boot class named spring-boot-autoconfigure only: webmvc is traced, unnamed.
    assert webmvc["reachability"] == "not observed", reach
    assert reach["source"] == "prod/shop sends traces; none names this component"
    assert h2["rank"] < webmvc["rank"]
