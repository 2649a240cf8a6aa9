"""In a real browser: from the findings list, start an export with the current filters, watch
it finish, download the file and open it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.exports.helpers import bulk_findings
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_person_exports_findings_and_opens_the_downloads(
    team, other_team, make_user, web_server, start_worker, browser_page, tmp_path
):
    make_user("alice", team=team)
    bulk_findings(team, 40, prefix="ours")
    bulk_findings(other_team, 5, prefix="theirs")
    start_worker()

    page = browser_page
    page.goto(f"{web_server.url}/findings/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice")
    page.click("button[type=submit]")
    page.wait_for_selector("#export-findings")
    # Filtering re-draws the table (htmx) and the export link with it.
    page.select_option("#filter-form select[name=severity]", "high")
    page.click("#filter-form button[type=submit]")
    page.wait_for_selector("#export-findings[href*='severity=high']")
    page.click("#export-findings")
    page.wait_for_selector("#export-form")
    assert "severity=high" in page.url
    assert page.locator("select[name=severity] option[value=high]").evaluate("o => o.selected")

    # CSV: start, watch the job finish (htmx polling), download, parse.
    page.select_option("select[name=format]", "csv")
    page.click("#start-export")
    page.wait_for_selector("#export-status:text('done')", timeout=60_000)
    with page.expect_download() as info:
        page.click("#download")
    download = info.value
    path = Path(tmp_path / download.suggested_filename)
    download.save_as(path)
    assert path.name.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert len(rows) == 40
    assert all(r["severity"] == "high" and r["title"].startswith("ours") for r in rows)
    export = Export.objects.get(format="csv")
    # The filter form sends its "Show" control and its sort too: open findings of high
    # severity, in rank order (the list's default).
    assert export.filter_params == {"open": ["true"], "severity": ["high"], "ordering": ["rank"]}
    assert AuditEvent.objects.filter(
        action="export", subject_id=str(export.pk), after__sha256=export.sha256
    ).exists()

    # PDF: the same filters, the printable report.
    page.goto(f"{web_server.url}/exports/?severity=high")
    page.select_option("select[name=format]", "pdf")
    page.click("#start-export")
    page.wait_for_selector("#export-status:text('done')", timeout=90_000)
    with page.expect_download() as info:
        page.click("#download")
    pdf = Path(tmp_path / info.value.suggested_filename)
    info.value.save_as(pdf)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    from pypdf import PdfReader

    text = "".join(p.extract_text() for p in PdfReader(io.BytesIO(data)).pages)
    assert "Findings report" in text and "GHSA-ours-1" in text
    page.screenshot(path=str(tmp_path / "exports.png"))
