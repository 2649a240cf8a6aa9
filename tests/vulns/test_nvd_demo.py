"""The demo's vulnerability findings with and without its NVD page: the sample data the demo
loads (ingest/demo_samples.py, ingest/demo_stories.py) run through the same ingest jobs in
this process, then the count of findings whose severity stays "unknown"."""

from __future__ import annotations

import pytest

from ingest import demo
from ingest.demo_samples import REJECT_MARKERS, sample_files, sbom_project
from trustrank.findings.choices import FindingKind
from trustrank.findings.models import Finding
from trustrank.vulns.services.feeds import feed_payload_read

from .helpers import ADVISORIES, DATA, SBOMS, load_sbom, run_job

pytestmark = pytest.mark.django_db

# Measured with `pytest -s tests/vulns/test_nvd_demo.py` (it prints the count). When the NVD page
# was first added (57 records): 223 of 267 vulnerability findings "unknown" without it, 152 with
# it. Now the page holds 126 real NVD records and tests/data/advisories/osv/go holds 15 real
# GitHub advisories (GHSA) that the demo's Go records alias: their CVSS (or reviewed severity
# label) goes to the same finding, so 204 stay "unknown" without the NVD page and 57 with it.
# The rest are 2025-2026 golang.org/x/* CVEs that NVD has not scored (Received/Deferred) or that
# the stored mirrors do not hold yet, and whose Go records alias no GHSA.
UNKNOWN_WITHOUT_NVD = 204
UNKNOWN_AT_MOST = 57


def _feed(team, kind, path):
    payload, filename = feed_payload_read(kind=kind, path=str(path))
    job = run_job(team, kind, payload, filename=filename)
    assert job.status == "done", (path, job.error)


def demo_data_load(team, *, nvd: bool) -> None:
    """What `dev.py demo` sends: the sample feeds, the sample SBOMs, the shop's feeds and
    SBOMs, and (with `nvd`) the NVD pages of tests/data/advisories/nvd and the shop's."""
    osv = ADVISORIES / "osv"
    for folder in sorted(osv.iterdir()):
        if folder.is_dir() and folder.name != "edge" and not any(
            m in folder.name.lower() for m in REJECT_MARKERS
        ):
            _feed(team, "osv", folder)
    for kind in ("kev", "epss"):
        for path in sample_files(ADVISORIES / kind, (".json", ".csv", ".gz")):
            _feed(team, kind, path)
    _feed(team, "osv", DATA / "demo" / "advisories-demo.json")
    _feed(team, "epss", DATA / "demo" / "epss-demo.csv")
    if nvd:
        for path in sample_files(ADVISORIES / "nvd", (".json", ".gz")):
            _feed(team, "nvd", path)
    for path in sample_files(SBOMS, (".json", ".xml")):
        name, version = sbom_project(path)
        job = run_job(team, "sbom", path.read_bytes(),
                      params={"projectName": name, "projectVersion": version,
                              "autoCreate": True})
        if job.status == "done":
            load_sbom(team, path.read_bytes(), project=name, version=version)
    for _service, project, version, _impact, sbom in demo.SERVICES:
        load_sbom(team, (DATA / "demo" / sbom).read_bytes(), project=project, version=version)


def _unknown() -> tuple[int, int]:
    vulns = Finding.objects.filter(kind=FindingKind.VULNERABILITY)
    return vulns.filter(severity="unknown").count(), vulns.count()


def test_demo_findings_are_rarely_unknown_with_the_nvd_page(team):
    demo_data_load(team, nvd=True)
    unknown, total = _unknown()
    print(f"demo findings with severity unknown: {unknown} of {total}")
    assert total > 200
    assert unknown <= UNKNOWN_AT_MOST < UNKNOWN_WITHOUT_NVD
    from_nvd = Finding.objects.filter(severity_source="nvd")
    assert from_nvd.count() >= UNKNOWN_WITHOUT_NVD - UNKNOWN_AT_MOST
    assert not from_nvd.filter(severity="unknown").exists()
    assert not from_nvd.filter(cvss_vector="").exists()
    # A GHSA aliased by a Go record joins that record's finding rather than adding one.
    per_cve = vulns_per_cve()
    assert per_cve and max(per_cve.values()) == 1
    assert Finding.objects.filter(advisory__id__startswith="GHSA-", ecosystem="Go").exists()


def vulns_per_cve() -> dict[tuple[int, str, str], int]:
    counts: dict[tuple[int, str, str], int] = {}
    for key in Finding.objects.filter(kind=FindingKind.VULNERABILITY).exclude(
        cve_id=""
    ).values_list("project_version_id", "component_key", "cve_id"):
        counts[key] = counts.get(key, 0) + 1
    return counts
