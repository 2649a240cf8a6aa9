"""Every real SBOM in tests/data/sbom matched against every real OSV record in
tests/data/advisories/osv. Expected findings below were checked by hand against each
advisory's ranges (the range that decides is noted next to each)."""

from __future__ import annotations

import orjson
import pytest

from trustrank.findings.models import Finding
from trustrank.vulns.models import Advisory
from trustrank.vulns.services.feeds import feed_payload_read

from .helpers import ADVISORIES, SBOMS, load_sbom, run_job

pytestmark = pytest.mark.django_db

EXPECTED = {
    "cdx-1.2_maven_dropwizard-1.3.15.xml": {
        ("h2", "1.4.197", "CVE-2021-42392"),  # GHSA-h376: [1.1.100, 2.0.206)
        ("jackson-databind", "2.9.10", "CVE-2020-36518"),  # GHSA-57j2: [0, 2.12.6.1)
        ("jackson-databind", "2.9.10", "CVE-2022-42003"),  # GHSA-jjjh: [2.4.0-rc1, 2.12.7.1)
        ("junit", "4.12", "CVE-2020-15250"),  # GHSA-269g: [4.7, 4.13.1)
        ("snakeyaml", "1.23", "CVE-2022-1471"),  # GHSA-mjmj: [0, 2.0)
        # commons-text 1.2 is outside GHSA-599f's [1.5, 1.10.0): no finding.
    },
    "cdx-1.2_npm_cern-lhc-vdm-editor.json": {
        ("minimatch", "3.0.4", "CVE-2022-3517"),  # GHSA-f8q6: [0, 3.0.5)
        ("minimist", "0.0.8", "CVE-2021-44906"),  # GHSA-xvch second range: [0, 0.2.4)
    },
    "cdx-1.6_pypi_poetry-project-56deps.json": {
        ("fastapi", "0.1.17", "CVE-2021-32677"),  # PYSEC-2021-100: [0, 0.65.2)
        ("fastapi", "0.1.17", "CVE-2024-24762"),  # PYSEC-2024-38: [0, 0.109.1)
        ("idna", "3.6", "CVE-2024-3651"),  # PYSEC-2024-60: [0.1, 3.7)
    },
    "cdx-1.6_apk-maven_dependency-track-issue4455.json": {
        # distro=3.20.3 -> Alpine:v3.20 entry: [0.9.13, 1.2.5-r1); other releases ignored.
        ("musl", "1.2.5-r0", "ALPINE-CVE-2025-26519"),
    },
    "cdx-1.4_npm_juice-shop-11.1.2_flat.json": {
        ("express", "4.18.2", "CVE-2024-29041"),  # GHSA-rv95: [0, 4.19.2)
        ("lodash", "2.4.2", "CVE-2019-10744"),  # GHSA-jf85: [0, 4.17.12)
        ("lodash", "2.4.2", "CVE-2020-8203"),  # GHSA-p6mc: [0, 4.17.20)
        ("lodash", "2.4.2", "CVE-2021-23337"),  # GHSA-35jh: [0, 4.17.21)
        ("minimist", "0.2.3", "CVE-2021-44906"),  # GHSA-xvch: [0, 0.2.4)
        ("semver", "5.7.1", "CVE-2022-25883"),  # GHSA-c2qf: [0, 5.7.2)
        ("semver", "6.3.0", "CVE-2022-25883"),  # GHSA-c2qf: [6.0.0, 6.3.1)
        ("semver", "7.3.8", "CVE-2022-25883"),  # GHSA-c2qf: [7.0.0, 7.5.2)
        ("tough-cookie", "2.5.0", "CVE-2023-26136"),  # GHSA-72xf: [0, 4.1.3)
    },
}
EXPECTED["cdx-1.2_npm_cern-lhc-vdm-editor.xml"] = EXPECTED["cdx-1.2_npm_cern-lhc-vdm-editor.json"]
EXPECTED["cdx-1.5_pypi_poetry-project-56deps.xml"] = EXPECTED[
    "cdx-1.6_pypi_poetry-project-56deps.json"
]


def test_real_sboms_against_real_osv_records(team):
    payload, filename = feed_payload_read(kind="osv", path=str(ADVISORIES / "osv"))
    job = run_job(team, "osv", payload, filename=filename)
    assert job.status == "done", job.error
    ids = {orjson.loads(f.read_bytes())["id"] for f in (ADVISORIES / "osv").rglob("*.json")}
    assert Advisory.objects.count() == len(ids)  # an id in two files is stored once
    loaded = {}
    for path in sorted(p for p in SBOMS.iterdir() if p.is_file() and p.suffix in (".json", ".xml")):
        sbom_job = run_job(
            team,
            "sbom",
            path.read_bytes(),
            params={"projectName": path.stem, "projectVersion": "1", "autoCreate": True},
        )
        if sbom_job.status != "done":
            continue  # the SBOM loader refuses it (spec 1.1, schema errors); not ours to match
        loaded[path.name] = load_sbom(team, path.read_bytes(), project=path.stem, version="1")
    assert set(EXPECTED) <= set(loaded)
    for name, expected in EXPECTED.items():
        got = {
            (f.component_name, f.component_version, f.vuln_id)
            for f in Finding.objects.filter(project_version=loaded[name])
        }
        assert got == expected, name
    assert not Finding.objects.filter(
        project_version__in=loaded.values(), match_status="reported"
    ).exists()
    # The mongo image's main module has version "(devel)": reported as unknown, not dropped.
    mongo = loaded["cdx-1.4_deb-golang_mongo-image.json"]
    unknown = Finding.objects.get(project_version=mongo, match_status="unknown")
    assert unknown.component_version == "(devel)" and "not a valid" in unknown.match_reason
    # Go pseudo-versions order by their timestamp: x/crypto v0.0.0-20220622… is after
    # GO-2022-0968's fix (SEMVER [0, 0.0.0-20211202192323-5770296d904e)), so no finding.
    assert not Finding.objects.filter(
        project_version=mongo, component_name="golang.org/x/crypto", vuln_id="CVE-2021-43565"
    ).exists()
    assert (
        Finding.objects.filter(
            project_version=mongo, component_name="golang.org/x/crypto", match_status="affected"
        ).count()
        >= 10
    )
