"""A Go (or PyPA) advisory without CVSS and the GitHub advisory it aliases: one finding, which
shows the GHSA's CVSS, or failing that its reviewed severity label (the demo's
tests/data/advisories/osv/go/GHSA-*.json records, see tests/vulns/test_nvd_demo.py)."""

from __future__ import annotations

import pytest

from trustrank.findings.models import Finding

from .helpers import CVSS_MEDIUM, bom, import_osv, load_sbom, osv

pytestmark = pytest.mark.django_db

XNET = ("golang.org/x/net", "v0.10.0", "pkg:golang/golang.org/x/net@v0.10.0")
EVENTS = [{"introduced": "0"}, {"fixed": "0.17.0"}]


def _go() -> dict:
    return osv("GO-2023-2102", "Go", "golang.org/x/net", EVENTS,
               aliases=["CVE-2023-39325", "GHSA-4374-p667-p6c8"], summary="HTTP/2 rapid reset")


def _ghsa(**extra) -> dict:
    doc = osv("GHSA-4374-p667-p6c8", "Go", "golang.org/x/net", EVENTS,
              aliases=["CVE-2023-39325"], summary="HTTP/2 rapid reset can cause DDoS")
    doc.update(extra)
    return doc


@pytest.mark.parametrize("ghsa_first", [False, True])
def test_the_aliased_ghsas_cvss_gives_the_one_finding_its_severity(team, ghsa_first):
    records = [_go(), _ghsa(severity=[{"type": "CVSS_V3", "score": CVSS_MEDIUM}])]
    for record in reversed(records) if ghsa_first else records:
        assert import_osv(team, [record]).status == "done"
    load_sbom(team, bom([XNET]))
    f = Finding.objects.get(team=team)
    assert f.vuln_id == "CVE-2023-39325"
    assert f.advisory_id == "GHSA-4374-p667-p6c8"
    assert (f.cvss_score, f.cvss_vector, f.severity) == (4.6, CVSS_MEDIUM, "medium")
    assert f.severity_source == "advisory"


@pytest.mark.parametrize("first", ["GO-2023-2102", "CVE-2023-39325"])
def test_without_cvss_the_ghsas_reviewed_label_beats_no_severity(team, first):
    """Whichever id sorts first: an OSV record named by its CVE comes before the GHSA."""
    plain = _go() if first.startswith("GO-") else osv(
        first, "Go", "golang.org/x/net", EVENTS, aliases=["GHSA-4374-p667-p6c8"])
    ghsa = _ghsa(database_specific={"severity": "HIGH", "github_reviewed": True})
    assert import_osv(team, [plain, ghsa]).status == "done"
    load_sbom(team, bom([XNET]))
    f = Finding.objects.get(team=team)
    assert f.advisory_id == "GHSA-4374-p667-p6c8"
    assert (f.severity, f.severity_source, f.cvss_score) == ("high", "label", None)


def test_without_any_severity_the_finding_stays_unknown(team):
    assert import_osv(team, [_go(), _ghsa()]).status == "done"
    load_sbom(team, bom([XNET]))
    f = Finding.objects.get(team=team)
    assert (f.severity, f.severity_source) == ("unknown", "")
