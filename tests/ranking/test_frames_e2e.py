"""A component observed from stack frames alone, end to end: an OTLP export whose span
carries an `exception` event goes through gunicorn, a real Celery worker aggregates it, a
ranking run (on the worker) ranks Log4Shell with the frame named in its explanation, and
the API and the finding page say so — with the call rate's window and the deployment by
name and source."""

from __future__ import annotations

from datetime import date

import pytest
import requests
from opentelemetry.trace import SpanKind

from ingest.models import IngestJob, JobStatus
from tests.conftest import wait_for
from tests.parsers.test_stackframes import JAVA
from tests.ranking.scenario import CVSS_10, LOG4J
from tests.runtime.helpers import SpanFactory, exception_event
from tests.vulns.helpers import bom, import_osv, load_sbom, osv
from trustrank.findings.models import Finding
from trustrank.runtime.models import LibraryBucket
from trustrank.vulns.models import KevEntry

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FRAME = "exception frame org.apache.logging.log4j.core.Logger.log"


def _advisory_and_sbom(team) -> None:
    import_osv(team, [
        osv("GHSA-jfh8-c2jp-5v3q", "Maven", "org.apache.logging.log4j:log4j-core",
            [{"introduced": "2.0-beta9"}, {"fixed": "2.15.0"}], aliases=["CVE-2021-44228"],
            severity=CVSS_10, summary="Remote code injection in Log4j"),
    ])
    KevEntry.objects.create(cve_id="CVE-2021-44228", vendor_project="Apache", product="Log4j2",
                            vulnerability_name="Log4Shell", date_added=date(2021, 12, 10))
    load_sbom(team, bom([LOG4J]), project="payment-gateway", version="2.3.1")
    from trustrank.vulns.services.exploit import findings_refresh_exploit_data

    findings_refresh_exploit_data()


def _export(*, service: str, spans: int) -> bytes:
    """Root server spans from a public address, each failing with a Log4j stack trace; the
    scope (a manual tracer) and the attributes name no library."""
    f = SpanFactory(env="prod")
    # All in one minute (the one just ended), so the peak is 30/min whatever the clock says.
    f.now -= f.now % 60_000_000_000 + 1_000_000
    resource = f.resource(service, **{"service.version": "2.3.1"})
    for i in range(spans):
        f.span(service=service, name="POST /pay", kind=SpanKind.SERVER, trace_id=f.trace_id(),
               start_offset_ms=-i * 10, attributes={"client.address": "93.184.216.34"},
               error=True, scope=("com.shop.payments", "1.0"), resource=resource,
               events=[exception_event(JAVA, type_="AppenderLoggingException")])
    return f.body()


def test_a_component_observed_from_exception_frames_alone(
    web_server, celery_worker, team, other_team, make_key, make_user, client
):
    _advisory_and_sbom(team)
    key = make_key(team, "traces:write", "sbom:write", "read", "triage")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {key}"
    r = http.put(f"{web_server.url}/api/v1/environments/prod/services/payment-gateway/deployment",
                 json={"project": "payment-gateway", "version": "2.3.1",
                       "human_impact": "high"}, timeout=30)
    assert r.status_code == 200, r.text

    r = http.post(f"{web_server.url}/v1/traces", data=_export(service="payment-gateway", spans=30),
                  headers={"Content-Type": "application/x-protobuf"}, timeout=30)
    assert r.status_code == 200, r.text

    def traces_done():
        jobs = list(IngestJob.objects.filter(kind="traces"))
        assert not [j.error for j in jobs if j.status == JobStatus.FAILED]
        return jobs and all(j.status == JobStatus.DONE for j in jobs)

    wait_for(traces_done, timeout=120)
    # The aggregation recorded the frame as library evidence, nothing else names log4j.
    evidence = set(LibraryBucket.objects.filter(service__environment__team=team)
                   .values_list("kind", "name"))
    assert ("java_frame", "org.apache.logging.log4j.core.Logger.log") in evidence
    assert not [e for e in evidence if e[0] in ("scope", "code") and "log4j" in e[1]]

    r = http.post(f"{web_server.url}/api/v1/ranking-runs", json={}, timeout=30)
    assert r.status_code == 202, r.text
    status_url = f"{web_server.url}{r.json()['status_url']}"

    def run_done():
        body = http.get(status_url, timeout=30).json()
        assert body["status"] != "failed", body.get("error")
        return body["status"] == "done"

    wait_for(run_done, timeout=180, interval=0.5)

    queue = http.get(f"{web_server.url}/api/v1/priorities?environment=prod",
                     timeout=30).json()["results"]
    (first,) = [q for q in queue if q["vuln_id"] == "CVE-2021-44228"]
    assert first["rank"] == 1 and first["reachability"] == "observed"
    assert first["exposure"] == "open" and first["service"] == "payment-gateway"
    factors = {f["name"]: f for f in first["explanation"]}
    reach = factors["reachability"]["source"]
    assert reach.startswith(f"{FRAME} on prod/payment-gateway, called ")
    # Thirty spans in the last minutes: the rate says its window, the last hour and the peak.
    assert "(last hour; peak 30/min over 24 h)" in reach, reach
    impact = factors["human_impact"]["source"]
    assert impact == "deployment prod/payment-gateway → payment-gateway@2.3.1 (source: API)"

    # The finding page: the factor table and the sentence name the frame.
    user = make_user("viewer-frames", team=team, role="viewer")
    client.force_login(user)
    log4j = Finding.objects.get(team=team, cve_id="CVE-2021-44228")
    html = client.get(f"/findings/{log4j.pk}/").content.decode()
    assert FRAME in html
    assert "payment-gateway@2.3.1 (source: API)" in html
    assert "log4j-core is exercised (evidence " + FRAME in html

    # Another team sees none of it.
    other = requests.get(f"{web_server.url}/api/v1/priorities",
                         headers={"Authorization": f"Bearer {make_key(other_team, 'read')}"},
                         timeout=30).json()
    assert other["count"] == 0
