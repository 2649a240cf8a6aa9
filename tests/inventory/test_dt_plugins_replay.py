"""The Dependency-Track CI plugins' request sequences, replayed byte for byte against the real
gunicorn server and a real Celery worker: the same paths, methods, headers and bodies.

Sources read (jenkinsci/dependency-track-plugin `api/ApiClient.java` and
`DependencyTrackPublisher.perform`; pmckeown/dependency-track-maven-plugin `BomClient`,
`ProjectClient`, `FindingsClient`, `MetricsClient`, `PolicyViolationsClient` and the mojos
that call them). Each plugin polls the upload token and then reads the findings at once: the
findings must already be there, equal to the SBOM's known vulnerabilities
(tests/vulns/test_real_data.py checked them by hand against the real OSV records).
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import quote

import pytest
import requests

from tests.conftest import DATA, wait_for
from tests.vulns.helpers import ADVISORIES, run_job
from tests.vulns.test_real_data import EXPECTED
from trustrank.accounts.services import api_key_issue
from trustrank.vulns.services.feeds import feed_payload_read

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

JUICE_SHOP = "cdx-1.4_npm_juice-shop-11.1.2_flat.json"
DROPWIZARD = "cdx-1.2_maven_dropwizard-1.3.15.xml"
POLL_TIMEOUT = 120

# What the Maven plugin's Unirest sends on every request (AbstractDependencyTrackMojo).
MAVEN_DEFAULTS = {
    "User-Agent": "dependency-track-maven-plugin/1.11.0 "
                  "(+https://github.com/pmckeown/dependency-track-maven-plugin)",
    "Accept-Encoding": "gzip, deflate",
    "Accept": "application/json",
}


@pytest.fixture
def feeds(team):
    """The real OSV records, imported before the plugin uploads. Asked for before the worker
    starts; if a worker claims the import first, it is waited for."""
    payload, filename = feed_payload_read(kind="osv", path=str(ADVISORIES / "osv"))
    job = run_job(team, "osv", payload, filename=filename)

    def status() -> str | None:
        job.refresh_from_db()
        return job.status if job.status in ("done", "failed") else None

    assert wait_for(status, timeout=POLL_TIMEOUT) == "done", job.error


@pytest.fixture
def ci_key(team):
    # A Dependency-Track "Automation" team: upload, and read the portfolio and findings.
    return api_key_issue(team=team, name="ci", scopes=["sbom:write", "read"]).secret


def expected(name: str) -> set[tuple[str, str, str]]:
    return set(EXPECTED[name])


def triples(findings: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(f["component"]["name"], f["component"]["version"], f["vulnerability"]["vulnId"])
            for f in findings}


def poll(get_processing: Any) -> None:
    deadline = time.monotonic() + POLL_TIMEOUT
    while get_processing():
        assert time.monotonic() < deadline, "the token kept processing"
        time.sleep(0.5)


def jenkins_alias_ids(finding: dict[str, Any]) -> list[str]:
    """FindingParser.parseAliases: every value of every alias object but the vulnId."""
    vuln = finding["vulnerability"]
    return [v for alias in vuln["aliases"] for v in alias.values()
            if v.lower() != vuln["vulnId"].lower()]


def test_jenkins_plugin_sequence(feeds, ci_key, web_server, celery_worker):
    base = web_server.url
    headers = {"X-Api-Key": ci_key, "Accept": "application/json"}  # ApiClient.createRequest
    # DescriptorImpl.testConnection (the job configuration's button): who answers, which
    # version, which permissions.
    r = requests.get(f"{base}/api/v1/project?pageNumber=1&pageSize=500&excludeInactive=true"
                     "&sortName=name&sortOrder=asc", headers=headers, timeout=30)
    assert r.status_code == 200 and r.headers["X-Powered-By"].startswith("Dependency-Track v")
    version = requests.get(f"{base}/api/version", headers=headers, timeout=30).json()["version"]
    assert tuple(int(p) for p in version.split(".")) >= (4, 12, 0)
    bom = (DATA / "sbom" / JUICE_SHOP).read_text()
    # uploadBom: multipart, the BOM as a plain form field, project by name and version.
    r = requests.post(
        f"{base}/api/v1/bom",
        headers=headers,
        files={"bom": (None, bom), "projectName": (None, "juice-shop"),
               "projectVersion": (None, "11.1.2"), "autoCreate": (None, "true")},
        timeout=30,
    )
    assert r.status_code == 200, r.text  # the plugin accepts only 200
    token = r.json()["token"]

    def processing() -> bool:
        t = requests.get(f"{base}/api/v1/event/token/{token}", headers=headers, timeout=30)
        assert t.status_code == 200, t.text
        return bool(t.json()["processing"])

    poll(processing)
    lookup = requests.get(
        f"{base}/api/v1/project/lookup?name={quote('juice-shop')}&version={quote('11.1.2')}",
        headers=headers, timeout=30,
    )
    assert lookup.status_code == 200, lookup.text
    project = lookup.json()
    assert (project["name"], project["version"]) == ("juice-shop", "11.1.2")
    uuid = project["uuid"]

    findings: list[dict[str, Any]] = []
    page = 1
    while True:  # getFindings: pages of 100 until X-Total-Count is reached
        r = requests.get(f"{base}/api/v1/finding/project/{uuid}?pageNumber={page}&pageSize=100",
                         headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        batch = r.json()
        findings += batch
        page += 1
        if not batch or len(findings) >= int(r.headers.get("X-Total-Count", len(batch))):
            break
    assert triples(findings) == expected(JUICE_SHOP)
    for f in findings:
        assert f["vulnerability"]["severity"] in ("CRITICAL", "HIGH", "MEDIUM", "LOW",
                                                  "UNASSIGNED")
        assert f["analysis"]["isSuppressed"] is False and f["matrix"].count(":") == 2
        assert f["vulnerability"]["vulnId"].startswith("CVE-")
        assert any(a.startswith("GHSA-") for a in jenkins_alias_ids(f))

    team = requests.get(f"{base}/api/v1/team/self", headers=headers, timeout=30)
    assert team.status_code == 200, team.text
    permissions = {p["name"] for p in team.json()["permissions"]}
    assert "VIEW_POLICY_VIOLATION" in permissions
    violations = requests.get(
        f"{base}/api/v1/violation/project/{uuid}?pageNumber=1&pageSize=100",
        headers=headers, timeout=30,
    )
    assert violations.status_code == 200 and violations.json() == []


def test_maven_plugin_sequence(feeds, ci_key, web_server, celery_worker):
    base = web_server.url
    headers = {**MAVEN_DEFAULTS, "X-Api-Key": ci_key}
    bom = (DATA / "sbom" / DROPWIZARD).read_bytes()
    # upload goal, uploadWithPut=true (the default): UploadBomRequest as JSON.
    r = requests.put(
        f"{base}/api/v1/bom",
        headers={**headers, "Content-Type": "application/json"},
        json={"projectName": "dropwizard", "projectVersion": "1.3.15", "autoCreate": True,
              "bom": base64.b64encode(bom).decode(), "parentUUID": None, "parentName": None,
              "parentVersion": None},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    poll(lambda: requests.get(f"{base}/api/v1/bom/token/{token}", headers=headers,
                              timeout=30).json()["processing"])
    lookup_url = f"{base}/api/v1/project/lookup?name=dropwizard&version=1.3.15"
    project = requests.get(lookup_url, headers=headers, timeout=30).json()
    uuid = project["uuid"]
    refresh = requests.get(f"{base}/api/v1/metrics/project/{uuid}/refresh", headers=headers,
                           timeout=30)
    assert refresh.status_code == 200

    # findings goal: lookup, then the whole list at once.
    assert requests.get(lookup_url, headers=headers, timeout=30).json()["uuid"] == uuid
    findings = requests.get(f"{base}/api/v1/finding/project/{uuid}", headers=headers,
                            timeout=30).json()
    assert triples(findings) == expected(DROPWIZARD)
    # The plugin's enums: Severity has no INFO, Analysis.State no RESOLVED by default.
    assert {f["vulnerability"]["severity"] for f in findings} <= {
        "CRITICAL", "HIGH", "MEDIUM", "LOW", "UNASSIGNED"}
    assert {f["analysis"]["state"] for f in findings} <= {
        "NOT_AFFECTED", "FALSE_POSITIVE", "IN_TRIAGE", "EXPLOITABLE", "NOT_SET"}

    # metrics goal: lookup, then current metrics, which agree with the findings.
    metrics = requests.get(f"{base}/api/v1/metrics/project/{uuid}/current", headers=headers,
                           timeout=30).json()
    for severity in ("critical", "high", "medium", "low", "unassigned"):
        assert metrics[severity] == sum(
            f["vulnerability"]["severity"] == severity.upper() for f in findings), severity
    assert metrics["findingsTotal"] == metrics["vulnerabilities"] == len(findings)
    assert metrics["suppressed"] == 0 and metrics["components"] > 0
    assert isinstance(metrics["firstOccurrence"], int)

    # score goal: the project's embedded metrics carry the inherited risk score.
    scored = requests.get(lookup_url, headers=headers, timeout=30).json()
    assert scored["metrics"]["inheritedRiskScore"] == metrics["inheritedRiskScore"] > 0

    # policy goal.
    assert requests.get(f"{base}/api/v1/violation/project/{uuid}", headers=headers,
                        timeout=30).json() == []

    # upload goal with uploadWithPut=false: multipart fields and the BOM as a file part.
    r = requests.post(
        f"{base}/api/v1/bom",
        headers=headers,
        files={"projectName": (None, "dropwizard"), "projectVersion": (None, "1.3.16"),
               "autoCreate": (None, "true"), "isLatest": (None, "false"),
               "bom": ("bom.xml", bom, "application/octet-stream")},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    poll(lambda: requests.get(f"{base}/api/v1/bom/token/{token}", headers=headers,
                              timeout=30).json()["processing"])
    other = requests.get(f"{base}/api/v1/project/lookup?name=dropwizard&version=1.3.16",
                         headers=headers, timeout=30).json()
    again = requests.get(f"{base}/api/v1/finding/project/{other['uuid']}", headers=headers,
                         timeout=30).json()
    assert triples(again) == expected(DROPWIZARD)
