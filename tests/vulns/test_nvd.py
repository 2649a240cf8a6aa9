"""NVD severities for findings whose advisory carries no CVSS: at matching time and after an
import, the advisory's CVSS winning, the explanation, the page, the API, the command and the
receiver's checks. Real NVD records (tests/data/nvd, see its PROVENANCE)."""

from __future__ import annotations

import copy
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from ingest.models import IngestJob
from tests.ranking.test_ranking_runs import rerank
from trustrank.findings.models import Finding
from trustrank.findings.records import EvidenceChange
from trustrank.vulns.models import NvdSeverity

from .helpers import CVSS_MEDIUM, DATA, bom, import_osv, load_sbom, osv, run_job

pytestmark = pytest.mark.django_db

PAGE_FILE = DATA / "nvd" / "nvd-cves-page.json"
PAGE: dict[str, Any] = json.loads(PAGE_FILE.read_bytes())
# CVE-2023-39325 (HTTP/2 rapid reset) in golang.org/x/net: NVD's Primary v3.1 is 7.5.
CVE = "CVE-2023-39325"
VECTOR = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H"
XNET = ("golang.org/x/net", "v0.10.0", "pkg:golang/golang.org/x/net@v0.10.0")
EVENTS = [{"introduced": "0"}, {"fixed": "0.17.0"}]


def _go_advisory(**extra: Any) -> dict[str, Any]:
    """A Go advisory as the Go database publishes them: no CVSS."""
    doc = osv("GO-2023-2102", "Go", "golang.org/x/net", EVENTS,
              aliases=["CVE-2023-39325", "GHSA-4374-p667-p6c8"], summary="HTTP/2 rapid reset")
    doc.update(extra)
    return doc


def _page(*records: dict[str, Any]) -> bytes:
    doc = {**PAGE, "vulnerabilities": list(records) or PAGE["vulnerabilities"]}
    return json.dumps(doc).encode()


def _record(cve_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(v for v in PAGE["vulnerabilities"] if v["cve"]["id"] == cve_id))


def _import_nvd(team, payload: bytes | None = None) -> IngestJob:
    return run_job(team, "nvd", payload if payload is not None else PAGE_FILE.read_bytes(),
                   filename="nvd-cves-page.json")


def _finding(team) -> Finding:
    return Finding.objects.get(team=team, cve_id=CVE)


def test_a_finding_without_advisory_cvss_takes_nvds_after_an_import(team):
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    before = _finding(team)
    assert (before.severity, before.cvss_score, before.severity_source) == ("unknown", None, "")
    EvidenceChange.objects.all().delete()
    job = _import_nvd(team)
    assert job.status == "done", job.error
    assert job.counts["with_cvss"] == 6 and job.counts["without_cvss"] == 1
    assert job.counts["findings_updated"] == 1
    f = _finding(team)
    assert (f.severity, f.cvss_score, f.severity_score, f.cvss_vector, f.severity_source) == (
        "high", 7.5, 7.5, VECTOR, "nvd")
    assert f.baseline_priority == 45.0  # 7.5 · 6, no EPSS, not in KEV
    # The import asks for a re-rank of every team, as the KEV and EPSS imports do.
    assert EvidenceChange.objects.filter(team_id=None, what__startswith="nvd feed job").exists()
    stored = NvdSeverity.objects.get(cve_id=CVE)
    assert (stored.version, stored.score, stored.source, stored.source_type) == (
        "3.1", 7.5, "nvd@nist.gov", "Primary")


def test_a_finding_matched_after_the_import_takes_nvds_at_matching(team):
    assert _import_nvd(team).status == "done"
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    f = _finding(team)
    assert (f.severity, f.cvss_score, f.cvss_vector, f.severity_source) == (
        "high", 7.5, VECTOR, "nvd")


def test_the_advisorys_own_cvss_wins_over_nvd_in_either_order(team, other_team):
    scored = _go_advisory(severity=[{"type": "CVSS_V3", "score": CVSS_MEDIUM}])
    import_osv(team, [scored])
    load_sbom(team, bom([XNET]))
    assert _import_nvd(team).status == "done"
    f = _finding(team)
    assert (f.severity, f.cvss_score, f.cvss_vector, f.severity_source) == (
        "medium", 4.6, CVSS_MEDIUM, "advisory")
    # Matched after the import: the same.
    load_sbom(other_team, bom([XNET]))
    g = Finding.objects.get(team=other_team, cve_id=CVE)
    assert (g.cvss_score, g.severity_source) == (4.6, "advisory")


def test_an_advisory_with_only_a_label_takes_nvds_score(team):
    import_osv(team, [_go_advisory(database_specific={"severity": "MODERATE"})])
    load_sbom(team, bom([XNET]))
    f = _finding(team)
    assert (f.severity, f.cvss_score, f.severity_source) == ("medium", None, "label")
    assert _import_nvd(team).status == "done"
    f = _finding(team)
    assert (f.severity, f.cvss_score, f.severity_source) == ("high", 7.5, "nvd")


def test_a_newer_nvd_record_replaces_the_stored_one_and_an_older_one_does_not(team):
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    assert _import_nvd(team).status == "done"
    older = _record(CVE)
    older["cve"]["lastModified"] = "2023-10-12T00:00:00.000"
    older["cve"]["metrics"]["cvssMetricV31"][0]["cvssData"].update(
        vectorString="CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:H", baseScore=5.9)
    assert _import_nvd(team, _page(older)).status == "done"
    assert (NvdSeverity.objects.get(cve_id=CVE).score, _finding(team).cvss_score) == (7.5, 7.5)
    newer = copy.deepcopy(older)
    newer["cve"]["lastModified"] = "2025-01-01T00:00:00.000"
    job = _import_nvd(team, _page(newer))
    assert job.counts["findings_updated"] == 1
    f = _finding(team)
    assert (f.cvss_score, f.severity, f.cvss_vector) == (
        5.9, "medium", "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:H")


def test_importing_the_same_page_again_changes_nothing(team):
    """A job run again after a dead worker (the sweep) leaves the state as one run did."""
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    assert _import_nvd(team).counts["findings_updated"] == 1
    stamp = _finding(team).updated_at
    again = _import_nvd(team)
    assert again.status == "done" and again.counts["findings_updated"] == 0
    assert _finding(team).updated_at == stamp
    assert NvdSeverity.objects.count() == 6


def test_a_page_bad_half_way_fails_the_job_and_stores_nothing(team):
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    bad = _record("CVE-2025-54410")
    bad["cve"]["metrics"]["cvssMetricV31"][1]["cvssData"]["vectorString"] = "CVSS:3.1/AV:Q"
    job = _import_nvd(team, _page(_record(CVE), bad))
    assert job.status == "failed"
    assert "bad CVSS v3.1 vector at CVE-2025-54410" in job.error
    assert not NvdSeverity.objects.exists()
    assert _finding(team).severity_source == ""


def test_the_explanation_the_page_and_the_api_name_nvd(team, client, make_user, api):
    import_osv(team, [_go_advisory()])
    load_sbom(team, bom([XNET]))
    assert _import_nvd(team).status == "done"
    rerank(team)
    f = _finding(team)
    factors = {x["name"]: x for x in f.rank_context.data["explanation"]}
    assert factors["severity"]["source"] == f"CVSS 7.5 ({VECTOR}) severity from NVD"
    assert factors["severity"]["value"] == 7.5
    user = make_user("alice", team=team, role="viewer")
    client.force_login(user)
    page = client.get(f"/findings/{f.pk}/").content.decode()
    assert "severity from NVD" in page and VECTOR in page
    data = api(team, "read").get(f"/api/v1/findings/{f.pk}").json()
    assert (data["severity"], data["cvss_score"], data["cvss_vector"], data["severity_source"]) \
        == ("high", 7.5, VECTOR, "nvd")


def test_an_advisory_scored_finding_does_not_say_nvd(team, client, make_user):
    import_osv(team, [_go_advisory(severity=[{"type": "CVSS_V3", "score": CVSS_MEDIUM}])])
    load_sbom(team, bom([XNET]))
    assert _import_nvd(team).status == "done"
    rerank(team)
    f = _finding(team)
    factors = {x["name"]: x for x in f.rank_context.data["explanation"]}
    assert factors["severity"]["source"] == f"CVSS 4.6 ({CVSS_MEDIUM})"
    client.force_login(make_user("bob", team=team, role="viewer"))
    assert "severity from NVD" not in client.get(f"/findings/{f.pk}/").content.decode()


# --- the command ---------------------------------------------------------------------------


def test_import_nvd_takes_several_files_plain_and_gzip(team, tmp_path):
    plain = tmp_path / "page-1.json"
    plain.write_bytes(_page(_record(CVE)))
    packed = tmp_path / "page-2.json.gz"
    packed.write_bytes(gzip.compress(_page(_record("CVE-2025-54410"))))
    unnamed = tmp_path / "page-3"  # gzip told by its magic bytes, not its name
    unnamed.write_bytes(gzip.compress(_page(_record("CVE-2025-64329"))))
    out = io.StringIO()
    call_command("import_nvd", str(plain), str(packed), str(unnamed), "--run-now", stdout=out)
    assert out.getvalue().count(" done: ") == 3, out.getvalue()
    assert set(NvdSeverity.objects.values_list("cve_id", flat=True)) == {
        CVE, "CVE-2025-54410", "CVE-2025-64329"}
    assert set(IngestJob.objects.values_list("kind", flat=True)) == {"nvd"}


def test_import_nvd_refuses_a_bad_file_before_queueing_anything(team, tmp_path):
    good = tmp_path / "good.json"
    good.write_bytes(PAGE_FILE.read_bytes())
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"format": "NVD_CPE", "version": "2.0", "products": []}')
    with pytest.raises(CommandError, match=r"bad.json: bad.json: not an NVD CVE API page"):
        call_command("import_nvd", str(good), str(bad), stdout=io.StringIO())
    not_gzip = tmp_path / "page.json.gz"
    not_gzip.write_bytes(PAGE_FILE.read_bytes())
    with pytest.raises(CommandError, match=r"named \.gz but not a gzip file"):
        call_command("import_nvd", str(not_gzip), stdout=io.StringIO())
    with pytest.raises(CommandError, match="No such file"):
        call_command("import_nvd", str(Path(tmp_path / "missing.json")), stdout=io.StringIO())
    # The good file before the bad one was not queued either.
    assert not IngestJob.objects.exists() and not NvdSeverity.objects.exists()


# --- the receiver --------------------------------------------------------------------------


@pytest.mark.parametrize("scopes", [("admin",), ("read", "sbom:write", "triage")])
def test_only_a_feeds_write_key_may_import_nvd(team, api, scopes):
    response = api(team, *scopes).post("/api/v1/feeds/nvd", PAGE_FILE.read_bytes(),
                                       content_type="application/json")
    assert response.status_code == 403, response.content
    assert not IngestJob.objects.filter(kind="nvd").exists()


def test_a_bad_page_is_refused_with_a_problem_naming_it(team, api):
    client = api(team, "feeds:write")
    bad = _record(CVE)
    bad["cve"]["metrics"]["cvssMetricV31"][0]["cvssData"]["vectorString"] = "CVSS:3.1/nope"
    response = client.post("/api/v1/feeds/nvd", _page(bad), content_type="application/json",
                           HTTP_X_FILENAME="nvdcve-2.0-2023.json")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/problem+json")
    assert "nvdcve-2.0-2023.json: bad CVSS v3.1 vector at CVE-2023-39325" in (
        response.json()["detail"])
    response = client.post("/api/v1/feeds/nvd", b"<html>", content_type="text/html")
    assert response.status_code == 400 and "not JSON" in response.json()["detail"]
    assert not IngestJob.objects.filter(kind="nvd").exists()


def test_a_good_page_is_accepted_as_an_nvd_job(team, api):
    response = api(team, "feeds:write").post(
        "/api/v1/feeds/nvd", gzip.compress(PAGE_FILE.read_bytes()),
        content_type="application/gzip")
    assert response.status_code == 202, response.content
    job = IngestJob.objects.get(pk=response.json()["id"])
    assert (job.kind, job.status) == ("nvd", "queued")


def test_a_configured_nvd_source_is_imported_on_schedule(settings, tmp_path):
    from ingest.services import job_run
    from ingest.submit import feed_scheduled_submit

    page = tmp_path / "nvdcve-2.0-recent.json.gz"
    page.write_bytes(gzip.compress(PAGE_FILE.read_bytes()))
    settings.TRUSTRANK_FEED_SOURCES = {**settings.TRUSTRANK_FEED_SOURCES, "nvd": str(page)}
    job = feed_scheduled_submit(kind="nvd")
    assert job is not None and job.kind == "nvd" and job.filename == page.name
    job_run(job_id=str(job.pk))
    job.refresh_from_db()
    assert job.status == "done" and job.counts["with_cvss"] == 6
