"""Matching, finding lifecycle, feed imports and triage, through the real job handlers."""

from __future__ import annotations

import gzip

import pytest
from django.db import DatabaseError, connection, transaction

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import Principal
from trustrank.findings.choices import TriageState
from trustrank.findings.models import Finding
from trustrank.findings.records import AuditEvent
from trustrank.findings.services.triage import TriageError, finding_triage
from trustrank.vulns.models import Advisory, EpssLatest, EpssScore, KevEntry
from trustrank.vulns.services.matching import findings_match_project_version

from .helpers import (
    ADVISORIES,
    CVSS_CRITICAL,
    CVSS_MEDIUM,
    bom,
    import_osv,
    load_sbom,
    osv,
    run_job,
)

pytestmark = pytest.mark.django_db

LODASH = ("lodash", "4.17.15", "pkg:npm/lodash@4.17.15")
REQUESTS = ("requests", "2.19.0", "pkg:pypi/requests@2.19.0")
ADV_LODASH = osv(
    "GHSA-aaaa-bbbb-cccc",
    "npm",
    "lodash",
    [{"introduced": "0"}, {"fixed": "4.17.19"}],
    aliases=["CVE-2020-8203"],
    severity=CVSS_CRITICAL,
    range_type="SEMVER",
)
ADV_REQUESTS = osv(
    "PYSEC-2018-28",
    "PyPI",
    "requests",
    [{"introduced": "0"}, {"fixed": "2.20.0"}],
    aliases=["CVE-2018-18074"],
    severity=CVSS_MEDIUM,
)


def test_advisories_imported_first_then_sbom_load_creates_findings(team):
    assert import_osv(team, [ADV_LODASH, ADV_REQUESTS]).status == "done"
    pv = load_sbom(team, bom([LODASH, REQUESTS]))
    findings = {f.vuln_id: f for f in Finding.objects.filter(project_version=pv)}
    assert set(findings) == {"CVE-2020-8203", "CVE-2018-18074"}
    f = findings["CVE-2020-8203"]
    assert f.team_id == team.pk and f.advisory_id == "GHSA-aaaa-bbbb-cccc"
    assert f.aliases == ["CVE-2020-8203", "GHSA-aaaa-bbbb-cccc"]
    assert f.component_purl == "pkg:npm/lodash@4.17.15" and f.component_version == "4.17.15"
    assert f.match_status == "affected" and f.fixed_versions == ["4.17.19"]
    assert f.cvss_score == 9.8 and f.severity == "critical"
    assert f.state == TriageState.IN_TRIAGE
    assert f.baseline_priority == pytest.approx(9.8 * 6)
    created = AuditEvent.objects.get(finding_id=f.pk, action="created")
    assert "lodash@4.17.15" in created.reason


def test_feed_import_after_sbom_matches_only_changed_packages(team):
    pv = load_sbom(team, bom([LODASH, REQUESTS]))
    assert not Finding.objects.exists()
    job = import_osv(team, [ADV_REQUESTS])
    assert job.status == "done", job.error
    assert job.counts["findings_created"] == 1 and job.counts["packages_changed"] == 1
    f = Finding.objects.get(project_version=pv)
    assert f.package_name == "requests"
    before = f.last_seen
    job = import_osv(team, [ADV_LODASH])
    assert job.counts["findings_created"] == 1
    f.refresh_from_db()
    assert f.last_seen == before  # requests was not re-evaluated by the lodash import


def test_reimporting_the_same_records_changes_nothing(team):
    import_osv(team, [ADV_LODASH])
    load_sbom(team, bom([LODASH]))
    job = import_osv(team, [ADV_LODASH])
    assert job.counts["unchanged"] == 1 and job.counts["packages_changed"] == 0
    assert Finding.objects.count() == 1


def test_aliases_collapse_into_one_finding(team):
    ghsa = osv(
        "GHSA-9999-8888-7777",
        "PyPI",
        "requests",
        [{"introduced": "0"}, {"fixed": "2.20.0"}],
        aliases=["CVE-2018-18074"],
    )
    import_osv(team, [ADV_REQUESTS, ghsa])
    pv = load_sbom(team, bom([REQUESTS]))
    (f,) = Finding.objects.filter(project_version=pv)
    assert f.vuln_id == "CVE-2018-18074"
    assert set(f.aliases) == {"CVE-2018-18074", "GHSA-9999-8888-7777", "PYSEC-2018-28"}
    # The advisory with a CVSS vector is the one shown.
    assert f.advisory_id == "PYSEC-2018-28" and f.cvss_score == 4.6


def test_component_gone_from_newer_sbom_resolves_finding_with_reason(team):
    import_osv(team, [ADV_LODASH])
    pv = load_sbom(
        team, bom([LODASH, REQUESTS], serial="urn:uuid:11111111-1111-1111-1111-111111111111")
    )
    f = Finding.objects.get(project_version=pv)
    fingerprint = f.fingerprint
    load_sbom(team, bom([REQUESTS], serial="urn:uuid:22222222-2222-2222-2222-222222222222"))
    f.refresh_from_db()
    assert f.state == TriageState.RESOLVED and f.auto_resolved and f.resolved_at
    event = AuditEvent.objects.get(finding_id=f.pk, action="auto_resolved")
    assert "no longer in the current SBOM" in event.reason and "lodash@4.17.15" in event.reason
    assert event.before["state"] == "in_triage" and event.after["state"] == "resolved"
    # It comes back: same finding (stable fingerprint), reopened with an event.
    load_sbom(team, bom([LODASH], serial="urn:uuid:33333333-3333-3333-3333-333333333333"))
    f.refresh_from_db()
    assert f.fingerprint == fingerprint and f.state == TriageState.IN_TRIAGE
    assert AuditEvent.objects.filter(finding_id=f.pk, action="reopened").exists()
    assert Finding.objects.filter(project_version=pv).count() == 1


def test_newer_modified_wins_older_is_ignored_and_withdrawn_stops_matching(team):
    import_osv(team, [ADV_LODASH])
    pv = load_sbom(team, bom([LODASH]))
    older = dict(ADV_LODASH, modified="2020-01-01T00:00:00Z", summary="old text")
    assert import_osv(team, [older]).counts["unchanged"] == 1
    assert Advisory.objects.get(pk="GHSA-aaaa-bbbb-cccc").summary != "old text"
    newer = dict(ADV_LODASH, modified="2025-01-01T00:00:00.123456789Z", summary="new text")
    assert import_osv(team, [newer]).counts["updated"] == 1
    assert Advisory.objects.get(pk="GHSA-aaaa-bbbb-cccc").summary == "new text"
    gone = dict(ADV_LODASH, modified="2025-06-01T00:00:00Z", withdrawn="2025-06-01T00:00:00Z")
    job = import_osv(team, [gone])
    assert job.counts["withdrawn"] == 1 and job.counts["findings_resolved"] == 1
    f = Finding.objects.get(project_version=pv)
    assert f.state == TriageState.RESOLVED
    assert "withdrawn" in AuditEvent.objects.get(finding_id=f.pk, action="auto_resolved").reason


def test_range_change_resolves_finding_that_no_longer_matches(team):
    import_osv(team, [ADV_LODASH])
    pv = load_sbom(team, bom([LODASH]))
    narrowed = osv(
        "GHSA-aaaa-bbbb-cccc",
        "npm",
        "lodash",
        [{"introduced": "0"}, {"fixed": "4.17.10"}],
        aliases=["CVE-2020-8203"],
        modified="2025-01-01T00:00:00Z",
        range_type="SEMVER",
    )
    import_osv(team, [narrowed])
    f = Finding.objects.get(project_version=pv)
    assert f.state == TriageState.RESOLVED
    assert (
        "outside the affected ranges"
        in AuditEvent.objects.get(finding_id=f.pk, action="auto_resolved").reason
    )


def test_unparseable_version_is_kept_as_unknown(team):
    import_osv(team, [ADV_REQUESTS])
    pv = load_sbom(team, bom([("requests", "latest", "pkg:pypi/requests@latest")]))
    f = Finding.objects.get(project_version=pv)
    assert f.match_status == "unknown" and "not a valid" in f.match_reason


def test_embedded_vulnerabilities_and_vex_analysis_set_initial_state(team):
    pv = load_sbom(
        team, (ADVISORIES / "vex" / "cdx-1.6_pypi_setuptools-with-vulnerability.json").read_bytes()
    )
    f = Finding.objects.get(project_version=pv)
    assert f.vuln_id == "CVE-2018-7489" and f.source == "sbom" and f.match_status == "reported"
    assert f.state == "exploitable" and f.justification == "requires_environment"
    assert f.response == ["can_not_fix"] and f.detail == "Some extra detail"
    assert f.vex_evidence["analysis"]["state"] == "exploitable"
    assert f.vex_evidence["vulnerability"]["id"] == "CVE-2018-7489"
    assert f.cvss_score == 9.8
    assert "VEX" in AuditEvent.objects.get(finding_id=f.pk, action="created").reason


def test_embedded_vex_is_read_from_the_sbom_not_from_the_raw_upload(team):
    from ingest.models import IngestPayload

    pv = load_sbom(
        team,
        (ADVISORIES / "vex" / "cdx-1.6_pypi_setuptools-with-vulnerability.json").read_bytes(),
    )
    sbom = pv.current_sbom
    assert [v["id"] for v in sbom.vulnerabilities] == ["CVE-2018-7489"]
    IngestPayload.objects.filter(job_id=sbom.job_id).delete()
    findings_match_project_version(project_version_id=pv.pk)
    f = Finding.objects.get(project_version=pv)
    assert f.vuln_id == "CVE-2018-7489" and f.state == "exploitable"


def test_embedded_vex_in_xml_collapses_with_the_osv_match(team):
    # The spec example: jackson-databind 2.9.4, SNYK id with CVE-2018-7489 as reference,
    # analysis not_affected/code_not_reachable; GHSA-... for the same CVE is in the feed.
    ghsa = osv(
        "GHSA-4gq5-ch57-c2mg",
        "Maven",
        "com.fasterxml.jackson.core:jackson-databind",
        [{"introduced": "2.9.0"}, {"fixed": "2.9.5"}],
        aliases=["CVE-2018-7489"],
    )
    import_osv(team, [ghsa])
    pv = load_sbom(team, (ADVISORIES / "vex" / "cdx-1.5_spec-valid-vulnerability.xml").read_bytes())
    (f,) = Finding.objects.filter(project_version=pv, vuln_id="CVE-2018-7489")
    assert f.source == "osv" and f.match_status == "affected"
    assert (
        "SNYK-JAVA-COMFASTERXMLJACKSONCORE-32111" in f.aliases
        and "GHSA-4gq5-ch57-c2mg" in f.aliases
    )
    assert f.state == "not_affected" and f.justification == "code_not_reachable"


def test_kev_and_epss_feed_the_baseline_priority(team):
    import_osv(team, [ADV_LODASH])
    pv = load_sbom(team, bom([LODASH]))
    kev = {
        "catalogVersion": "2025.09.01",
        "vulnerabilities": [
            {
                "cveID": "CVE-2020-8203",
                "vendorProject": "lodash",
                "product": "lodash",
                "vulnerabilityName": "Lodash prototype pollution",
                "dateAdded": "2025-09-01",
                "shortDescription": "x",
                "requiredAction": "patch",
                "dueDate": "2025-09-22",
                "knownRansomwareCampaignUse": "Unknown",
                "notes": "",
                "cwes": ["CWE-1321"],
            }
        ],
    }
    import orjson

    job = run_job(team, "kev", orjson.dumps(kev))
    assert job.status == "done", job.error
    f = Finding.objects.get(project_version=pv)
    assert f.in_kev and str(f.kev_date_added) == "2025-09-01"
    assert f.baseline_priority == pytest.approx(9.8 * 6 + 15)
    day1 = b"#model_version:v2025.03.14,score_date:2025-10-01T00:00:00Z\ncve,epss,percentile\nCVE-2020-8203,0.40000,0.97000\n"
    day2 = b"#model_version:v2025.03.14,score_date:2025-10-02T00:00:00Z\ncve,epss,percentile\nCVE-2020-8203,0.80000,0.99000\n"
    assert run_job(team, "epss", gzip.compress(day2)).status == "done"
    assert run_job(team, "epss", day1).status == "done"  # an older day adds history only
    f.refresh_from_db()
    assert f.epss == 0.8 and f.epss_percentile == 0.99
    assert f.baseline_priority == pytest.approx(min(100, 9.8 * 6 + 0.8 * 25 + 15))
    assert list(
        EpssScore.objects.filter(cve_id="CVE-2020-8203")
        .order_by("score_date")
        .values_list("epss", flat=True)
    ) == [0.4, 0.8]
    assert EpssLatest.objects.get(cve_id="CVE-2020-8203").epss == 0.8


def test_real_kev_catalog_and_epss_sample_import(team):
    job = run_job(
        team, "kev", (ADVISORIES / "kev" / "known_exploited_vulnerabilities.json").read_bytes()
    )
    assert job.status == "done" and job.counts["entries"] == 1404
    assert KevEntry.objects.count() == 1404
    older = b'{"catalogVersion": "2025.01.24", "vulnerabilities": []}'
    job = run_job(team, "kev", older)
    assert job.counts.get("skipped_older_catalog") == 1 and KevEntry.objects.count() == 1404
    epss_file = next((ADVISORIES / "epss").glob("*.csv"))
    job = run_job(team, "epss", epss_file.read_bytes())
    assert job.status == "done" and job.counts["rows"] == 200
    assert job.result == {"score_date": "2026-09-29", "model_version": "v2026.06.15"}
    assert EpssScore.objects.filter(cve_id="CVE-1999-0001").get().epss == 0.03351


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("osv", b"{not json", "not valid JSON"),
        ("osv", b'[{"id": "X-1", "modified": "2024-01-01T00:00:00Z"}, {"id": "X-2"}]', "X-2"),
        (
            "osv",
            b'{"id": "X-3", "modified": "2024-01-01T00:00:00Z", "affected": [{"package": {"ecosystem": "npm", "name": "a"}, "ranges": [{"type": "SEMVER", "events": [{"introduced": "0", "fixed": "1"}]}]}]}',
            "exactly one of",
        ),
        (
            "kev",
            b'{"vulnerabilities": [{"cveID": "not-a-cve", "dateAdded": "2024-01-01"}]}',
            "not a CVE id",
        ),
        ("epss", b"cve,epss,percentile\nCVE-2020-1,0.1,0.2\n", "comment line"),
        (
            "epss",
            b"#model_version:v1,score_date:2025-01-01\ncve,epss,percentile\nCVE-2020-0001,0.1,0.2\nCVE-2020-0002,1.7,0.2\n",
            "line 4",
        ),
    ],
)
def test_bad_feed_input_fails_the_job_and_stores_nothing(team, kind, payload, message):
    job = run_job(team, kind, payload)
    assert job.status == "failed" and message in job.error
    assert not Advisory.objects.exists() and not KevEntry.objects.exists()
    assert not EpssScore.objects.exists()


def test_osv_zip_payload_imports_every_record(team):
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted((ADVISORIES / "osv" / "npm").glob("*.json")):
            z.write(f, arcname=f.name)
    job = run_job(team, "osv", buf.getvalue(), filename="all.zip")
    assert job.status == "done", job.error
    assert job.counts["inserted"] == 12 and Advisory.objects.count() == 12
    assert (job.progress_done, job.progress_total) == (12, 12)
    a = Advisory.objects.get(pk="GHSA-c2qf-rxjj-qqgw")
    assert a.cve_id == "CVE-2022-25883" and a.cvss_score is not None and a.severity[0]["base_score"]


def _principal(team, *scopes):
    return Principal(scopes_by_team={team.pk: frozenset(scopes)})


def test_triage_writes_an_audit_event_with_before_after_and_why(team):
    import_osv(team, [ADV_LODASH])
    pv = load_sbom(team, bom([LODASH]))
    f = Finding.objects.get(project_version=pv)
    with pytest.raises(TriageError, match="justification"):
        finding_triage(
            finding=f,
            principal=_principal(team, Scope.TRIAGE),
            state="not_affected",
            reason="not used",
        )
    with pytest.raises(PermissionError):
        finding_triage(
            finding=f, principal=_principal(team, Scope.READ), state="exploitable", reason="x"
        )
    finding_triage(
        finding=f,
        principal=_principal(team, Scope.TRIAGE),
        state="not_affected",
        justification="code_not_reachable",
        response=["will_not_fix"],
        detail="merge() is never called",
        reason="checked call sites",
    )
    f.refresh_from_db()
    assert f.state == "not_affected" and f.justification == "code_not_reachable"
    event = AuditEvent.objects.get(finding_id=f.pk, action="state_changed")
    assert event.before["state"] == "in_triage" and event.after["state"] == "not_affected"
    assert event.after["response"] == ["will_not_fix"] and event.reason == "checked call sites"
    assert event.created_at is not None and event.actor_label


def test_audit_events_are_append_only(team):
    import_osv(team, [ADV_LODASH])
    load_sbom(team, bom([LODASH]))
    event = AuditEvent.objects.first()
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with connection.cursor() as cur:
        cur.execute("SELECT reason FROM findings_auditevent WHERE id = %s", [event.pk])
        assert cur.fetchone()[0] != "rewritten"


def test_findings_belong_to_the_project_team(team, other_team):
    import_osv(team, [ADV_LODASH])
    pv_a = load_sbom(team, bom([LODASH]))
    pv_b = load_sbom(other_team, bom([LODASH]))
    a = Finding.objects.get(project_version=pv_a)
    b = Finding.objects.get(project_version=pv_b)
    assert a.team_id == team.pk and b.team_id == other_team.pk and a.fingerprint != b.fingerprint


def test_large_import_rematches_only_what_the_sboms_contain(team):
    pv = load_sbom(
        team, bom([(f"pkg{i}", "1.0.0", f"pkg:npm/pkg{i}@1.0.0") for i in (5, 1500, 2999)])
    )
    records = [
        osv(f"GHSA-big-{i:04d}-x", "npm", f"pkg{i}", [{"introduced": "0"}, {"fixed": "2.0.0"}])
        for i in range(3000)
    ]
    job = import_osv(team, records)
    assert job.status == "done", job.error
    assert job.counts["packages_changed"] == 3000 and job.counts["findings_project_versions"] == 1
    assert job.counts["findings_created"] == 3
    assert sorted(
        Finding.objects.filter(project_version=pv).values_list("package_name", flat=True)
    ) == ["pkg1500", "pkg2999", "pkg5"]
