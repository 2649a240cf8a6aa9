"""The gate end to end, as a pipeline sees it: SBOMs through gunicorn, a real Celery worker with
beat matching them and ranking (debounce 1 s), and `GET /api/v1/gate?…&wait=` held until the
ranking that includes the upload is done. The README's curl recipe runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT, WebServer
from tests.gate.helpers import LOG4J, LOG4SHELL, SPRING, SPRING4SHELL, advisories
from tests.vulns.helpers import bom
from trustrank.findings.models import Finding

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def readme_recipe() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Build gate"):]
    (line,) = re.findall(r"^curl -sS .*$", section[: section.index("\n### ")], re.M)
    return line


def run_recipe(*, url: str, key: str, project: str, version: str, says: str = "") -> int:
    """The recipe's exit code; `says`: text its output must hold (a reason, an error)."""
    command = readme_recipe().replace("project=shop&version=1.4", f"project={project}&"
                                      f"version={version}")
    done = subprocess.run(["bash", "-c", command], env={**os.environ, "URL": url, "KEY": key},
                          capture_output=True, text=True, timeout=320, check=False)
    assert says in done.stdout, done.stdout + done.stderr
    return done.returncode


class Pipeline:
    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.http = requests.Session()
        self.http.headers["X-Api-Key"] = key

    def upload(self, version: str, components, *, impact: str) -> None:
        r = self.http.post(
            f"{self.url}/api/v1/sboms",
            params={"projectName": "shop", "projectVersion": version, "autoCreate": "true",
                    "environment": "prod", "service": f"shop-{version}", "human_impact": impact},
            data=bom(list(components)), headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 202, r.text

    def gate(self, version: str, **extra: str) -> dict:
        r = self.http.get(f"{self.url}/api/v1/gate",
                          params={"project": "shop", "version": version, "wait": "100", **extra},
                          timeout=130)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["pending"] is False, body
        return body


def test_a_pipeline_gates_on_decisions_waivers_and_policy(
    web_server, start_worker, team, other_team, make_key
):
    start_worker(beat=True, TRUSTRANK_RANKING_DEBOUNCE_SECONDS="1",
                 TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS="1")
    advisories(team)
    key = make_key(team, "sbom:write", "read", "triage", "admin")
    ci = Pipeline(web_server.url, key)

    # 1.4 on an internet-facing (untraced, so read as open) service with high impact:
    # Log4Shell is immediate, and the gate asked right after the upload waits for it.
    ci.upload("1.4", [LOG4J], impact="high")
    body = ci.gate("1.4", environment="prod")
    assert body["pass"] is False and body["counts"]["immediate"] == 1
    assert body["reasons"][0].startswith(f"{LOG4SHELL} in log4j-core@2.14.1 is immediate (rank ")
    assert body["deployed_in_environment"] is True and body["upload"]["status"] == "done"
    assert run_recipe(url=web_server.url, key=key, project="shop", version="1.4",
                      says=f"{LOG4SHELL} in log4j-core@2.14.1 is immediate") == 1

    # Triaged not affected: the same version passes, and says who waived what.
    finding = Finding.objects.get(team=team, cve_id=LOG4SHELL, project_version__version="1.4")
    r = ci.http.post(f"{web_server.url}/api/v1/findings/{finding.pk}/triage",
                     json={"state": "not_affected", "justification": "code_not_reachable",
                           "reason": "no JNDI lookups"}, timeout=30)
    assert r.status_code == 200, r.text
    body = ci.gate("1.4")
    assert body["pass"] is True and body["counts"]["immediate"] == 0
    assert "waived: not_affected (code_not_reachable) by api-key:test" in body["reasons"][1]
    assert run_recipe(url=web_server.url, key=key, project="shop", version="1.4",
                      says="waived: not_affected") == 0

    # 1.5 with medium impact: out-of-cycle passes the default policy, not the stricter one.
    ci.upload("1.5", [LOG4J], impact="medium")
    body = ci.gate("1.5")
    assert body["pass"] is True and body["counts"]["out-of-cycle"] == 1
    r = ci.http.put(f"{web_server.url}/api/v1/gate/policy", json={"fail_on": "out-of-cycle"},
                    timeout=30)
    assert r.status_code == 200, r.text
    body = ci.gate("1.5")
    assert body["pass"] is False
    assert body["reasons"][0].startswith(f"{LOG4SHELL} in log4j-core@2.14.1 is out-of-cycle")

    # New findings only: 1.6 has what 1.5 had and passes; 1.7 brings Spring4Shell and fails.
    ci.http.put(f"{web_server.url}/api/v1/gate/policy", json={"new_only": True}, timeout=30)
    ci.upload("1.6", [LOG4J], impact="medium")
    body = ci.gate("1.6")
    assert body["pass"] is True and body["previous_version"] == "1.5"
    assert "already in 1.5" in body["reasons"][1]
    ci.upload("1.7", [LOG4J, SPRING], impact="medium")
    body = ci.gate("1.7")
    assert body["pass"] is False and [f["vuln_id"] for f in body["failing"]] == [SPRING4SHELL]
    assert body["reasons"][0].endswith(", new since 1.6")

    # The questions a pipeline gets wrong, and another team's view.
    get = ci.http.get
    r = get(f"{web_server.url}/api/v1/gate", params={"project": "shop", "version": "1.4",
                                                     "wait": "301"}, timeout=30)
    assert r.status_code == 400 and r.json()["param"] == "wait"
    r = get(f"{web_server.url}/api/v1/gate", params={"project": "shop"}, timeout=30)
    assert r.status_code == 400 and r.json()["param"] == "version"
    r = get(f"{web_server.url}/api/v1/gate", params={"project": "shop", "version": "9"},
            timeout=30)
    assert r.status_code == 404 and "'9'" in r.json()["detail"]
    r = requests.get(f"{web_server.url}/api/v1/gate", params={"project": "shop", "version": "1.4"},
                     headers={"X-Api-Key": make_key(other_team, "sbom:write", "read")},
                     timeout=30)
    assert r.status_code == 404 and "no project 'shop'" in r.json()["detail"]
    assert run_recipe(url=web_server.url, key=make_key(other_team, "read"), project="shop",
                      version="1.4", says="no project 'shop'") == 1


def test_held_requests_time_out_pending_and_do_not_starve_the_server(
    transactional_db, team, make_key, tmp_path: Path
):
    """No worker runs, so the upload stays queued: two requests held by `wait` (as many as the
    test server has worker processes) answer pending and failing when their time is up, and
    the server answers others meanwhile (threads, as in production)."""
    server = WebServer(log_path=tmp_path / "gunicorn.log",
                       extra_env={"GUNICORN_CMD_ARGS": "--threads 4"})
    try:
        key = make_key(team, "sbom:write", "read")
        ci = Pipeline(server.url, key)
        ci.upload("3.0", [LOG4J], impact="high")
        held: list[dict] = []

        def hold() -> None:
            r = requests.get(f"{server.url}/api/v1/gate",
                             params={"project": "shop", "version": "3.0", "wait": "6"},
                             headers={"X-Api-Key": key}, timeout=60)
            held.append(r.json())

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        started = time.monotonic()
        r = ci.http.get(f"{server.url}/api/v1/gate/policy", timeout=30)
        assert r.status_code == 200 and time.monotonic() - started < 3
        assert len(held) == 0  # both still held
        for t in threads:
            t.join(60)
        assert len(held) == 2
        for body in held:
            assert body["pending"] is True and body["pass"] is False
            assert body["reasons"][0].startswith("ranking not finished within 6 s: SBOM upload job ")
            assert body["waited_seconds"] >= 6
    finally:
        server.stop()
