"""`as_of` in every format, through the API to the finished file written by the export job,
and the audit chain's head digest in every file (or, for the CSV, beside it)."""

from __future__ import annotations

import io

import orjson
import pytest
from django.utils import timezone

from tests.conftest import wait_for
from tests.exports.helpers import body_of, csv_rows, ranked_scenario
from trustrank.accounts.principal import principal_for_user
from trustrank.exports.models import Export
from trustrank.exports.services.run import export_run_execute
from trustrank.findings.services.triage import finding_triage

FORMATS = ("csv", "json", "cyclonedx-vex", "csaf-vex", "html", "pdf")


@pytest.fixture
def history(team, make_user):
    """etcd triaged not_affected, then `before`, then log4j confirmed exploitable."""
    built = ranked_scenario(team)
    alice = make_user("alice", team=team)
    finding_triage(
        finding=built["etcd"], principal=principal_for_user(alice), state="not_affected",
        justification="code_not_reachable", reason="localhost only",
    )
    before = timezone.now()
    finding_triage(
        finding=built["log4j"], principal=principal_for_user(alice), state="exploitable",
        detail="reachable from the internet", reason="confirmed",
    )
    return {**built, "before": before}


def _params(fmt: str, history: dict, *, as_of: bool) -> dict[str, object]:
    params: dict[str, object] = {"format": fmt}
    if as_of:
        params["as_of"] = history["before"].isoformat()
    if fmt == "cyclonedx-vex":
        params["project_version"] = history["gateway_pv"].pk
    return params


def _job_file(client, params) -> tuple[Export, bytes, object]:
    """Ask through the API (queued as a job: the streaming cap is 0), run the job, download."""
    response = client.get("/api/v1/exports", params)
    assert response.status_code == 202, body_of(response)[:500]
    export_id = response.json()["id"]
    assert export_run_execute(export_id=export_id) == "done", Export.objects.get(pk=export_id).error
    status = client.get(f"/api/v1/exports/{export_id}").json()
    download = client.get(status["download_url"])
    assert download.status_code == 200
    return Export.objects.get(pk=export_id), body_of(download), download


def _log4j_state(fmt: str, body: bytes, history: dict) -> str:
    """What the file says log4j's triage state was."""
    log4j = history["log4j"].pk
    if fmt == "csv":
        return next(r["state"] for r in csv_rows(body) if int(r["finding_id"]) == log4j)
    if fmt == "json":
        return next(f["state"] for f in orjson.loads(body)["findings"] if f["finding_id"] == log4j)
    if fmt == "cyclonedx-vex":
        (vuln,) = orjson.loads(body)["vulnerabilities"]
        return str(vuln["analysis"]["state"])
    if fmt == "csaf-vex":
        vuln = next(v for v in orjson.loads(body)["vulnerabilities"] if v["cve"] == "CVE-2021-44228")
        return {"under_investigation": "in_triage", "known_affected": "exploitable"}[
            next(iter(vuln["product_status"]))
        ]
    text = _text(fmt, body)
    assert "CVE-2021-44228" in text
    return "exploitable" if "exploitable" in text else "in_triage"


def _text(fmt: str, body: bytes) -> str:
    if fmt == "pdf":
        from pypdf import PdfReader

        return "".join(p.extract_text() for p in PdfReader(io.BytesIO(body)).pages)
    return body.decode()


def _head_in_file(fmt: str, body: bytes, head: str) -> bool:
    if fmt == "json":
        return orjson.loads(body)["export"]["audit_chain"]["head_digest"] == head
    if fmt == "cyclonedx-vex":
        props = {p["name"]: p["value"] for p in orjson.loads(body)["metadata"]["properties"]}
        return props["trustrank:audit_head_digest"] == head
    if fmt == "csaf-vex":
        notes = orjson.loads(body)["document"]["notes"]
        return any(n["text"].startswith(f"head_digest {head}") for n in notes)
    if fmt == "pdf":
        # The report wraps the long digest: compare without whitespace.
        return head in "".join(_text(fmt, body).split())
    return head in _text(fmt, body)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fmt", FORMATS)
def test_as_of_file_of_every_format_says_how_things_were(
    api, team, history, fmt, settings, tmp_path
):
    settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 0
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "exports"
    client = api(team, "read")
    then, then_body, download = _job_file(client, _params(fmt, history, as_of=True))
    now, now_body, _ = _job_file(client, _params(fmt, history, as_of=False))
    assert then.as_of == history["before"] and now.as_of is None
    assert _log4j_state(fmt, then_body, history) == "in_triage"
    assert _log4j_state(fmt, now_body, history) == "exploitable"
    # The audit chain's head as the export saw it: in the file, and in a header of the
    # download (the CSV's only place for it, so its rows stay plain CSV).
    head = then.metadata["audit_chain"]["head_digest"]
    assert head and download["X-TrustRank-Audit-Head"] == head
    if fmt == "csv":
        assert then_body.startswith(b'"finding_id",')
    else:
        assert _head_in_file(fmt, then_body, head)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_as_of_csaf_on_a_real_worker(api, team, history, start_worker, settings, tmp_path):
    settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 0
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "exports"
    start_worker(TRUSTRANK_EXPORT_DIR=str(tmp_path / "exports"),
                 TRUSTRANK_EXPORT_STREAM_MAX_ROWS="0")
    client = api(team, "read")
    response = client.get("/api/v1/exports", _params("csaf-vex", history, as_of=True))
    assert response.status_code == 202

    def finished():
        status = client.get(response.json()["status_url"]).json()
        return status if status["status"] in ("done", "failed") else None

    status = wait_for(finished, timeout=120, interval=0.3)
    assert status["status"] == "done", status["error"]
    body = body_of(client.get(status["download_url"]))
    assert _log4j_state("csaf-vex", body, history) == "in_triage"
    assert orjson.loads(body)["document"]["category"] == "csaf_vex"
