"""The printable report an auditor hands over: landscape A4, a summary page first, then one
compact entry per finding in rank order with its explanation as text, numbered pages."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.exports.helpers import body_of, bulk_findings, ranked_scenario, rerank
from trustrank.exports.services import report, report_pdf
from trustrank.exports.services.formats import explanation_text
from trustrank.findings.models import FindingDue
from trustrank.ranking.models import RankedFinding

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(team):
    scenario = ranked_scenario(team)
    # Log4j is past due: the summary counts it overdue.
    FindingDue.objects.update_or_create(
        finding=scenario["log4j"], defaults={
            "team": team, "due_date": timezone.localdate() - timedelta(days=3)
        },
    )
    return scenario


def _pdf(api, team, **params):
    from pypdf import PdfReader

    response = api(team, "read").get("/api/v1/exports", {"format": "pdf", **params})
    assert response.status_code == 200, body_of(response)[:2000]
    return PdfReader(io.BytesIO(body_of(response)))


def _explanation_of(finding) -> str:
    ranked = RankedFinding.objects.select_related("context").get(finding=finding)
    return explanation_text(ranked.context.data["explanation"])


def test_pdf_is_landscape_with_a_summary_first_and_explanations_as_text(api, team, data):
    reader = _pdf(api, team)
    for page in reader.pages:
        assert float(page.mediabox.width) > float(page.mediabox.height)
    first = reader.pages[0].extract_text()
    assert "Findings report" in first and "SSVC decision" in first
    assert "in CISA KEV" in first and "overdue" in first and "intact" in first
    assert "Generated" in first and "As of" in first and "Filters" in first
    # The summary stands alone: no finding, nor the findings' column headings, on its page.
    assert "Why (explanation)" not in first and "#" not in first
    second = reader.pages[1].extract_text()
    for heading in ("Rank", "Decision", "Score", "Vulnerability #finding", "Title",
                    "Component@version", "Project / version", "Service", "Environment",
                    "KEV · EPSS · CVSS", "Status", "Due", "Why (explanation)"):
        assert heading in second
    text = " ".join(" ".join(p.extract_text().split()) for p in reader.pages)
    # Explanations are text, wrapped lines joined back.
    expected = " ".join(_explanation_of(data["log4j"]).split())
    assert expected[:60] in text and expected[-40:] in text
    assert "log4j-core@2.14.1" in text and "payment-gateway" in text
    total = len(reader.pages)
    assert f"page 1 of {total}" in first and f"page {total} of {total}" in text


def test_summary_counts_decisions_kev_and_overdue(team, data):
    from trustrank.exports.services.params import ExportRequest
    from trustrank.exports.services.rows import export_selection

    selection = export_selection(ExportRequest(format="html", team_id=team.pk))
    summary = report.report_summary(selection, {"team": {"id": team.pk}})
    decisions = dict(summary["by_decision"])
    assert list(decisions)[:4] == ["immediate", "out-of-cycle", "scheduled", "defer"]
    assert sum(decisions.values()) == summary["total"] == 2
    assert summary["kev"] == 1 and summary["overdue"] == 1


def test_rows_are_in_rank_order(team, data):
    from trustrank.exports.services.params import ExportRequest
    from trustrank.exports.services.rows import export_selection

    bulk_findings(team, 40)
    rerank(team)
    selection = export_selection(ExportRequest(format="html", team_id=team.pk))
    ranks = [r["rank"] for r in report.report_rows(selection)]
    assert len(ranks) == 42 and ranks == sorted(ranks)


def test_a_big_report_is_numbered_through_with_every_finding_once_in_rank_order(
    api, team, data, monkeypatch
):
    bulk_findings(team, 60)
    rerank(team)
    # Small tables: they break across pages and follow one another on a page.
    monkeypatch.setattr(report_pdf, "TABLE_ROWS", 7)
    reader = _pdf(api, team)
    total = len(reader.pages)
    assert total >= 4
    texts = [p.extract_text() for p in reader.pages]
    for number, text in enumerate(texts, start=1):
        assert f"page {number} of {total}" in text
        if number > 1:
            assert "Why (explanation)" in text  # the headings on every page of findings
    joined = " ".join(texts)
    ids = RankedFinding.objects.filter(team=team).order_by("rank").values_list(
        "finding_id", flat=True
    )
    positions = [[m.start() for m in re.finditer(rf"#{fid}\b", joined)] for fid in ids]
    assert all(len(p) == 1 for p in positions) and len(positions) == 62
    assert [p[0] for p in positions] == sorted(p[0] for p in positions)
    assert "End of the report: 62 of 62 findings listed" in joined


def test_long_words_are_broken_inside_their_column():
    from reportlab.pdfbase.pdfmetrics import stringWidth

    report_pdf.fonts_register()
    purl = "pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1?type=jar&classifier=x" * 2
    lines = report_pdf.wrap([purl, "a title with spaces " * 8], 100).split("\n")
    assert len(lines) > 4 and "".join(lines).startswith(purl)
    assert all(stringWidth(line, report_pdf.FONT, report_pdf.SIZE) <= 96 for line in lines)


def test_a_finding_too_long_for_a_page_is_cut_not_failed(api, team, data):
    from trustrank.findings.models import Finding

    Finding.objects.filter(pk=data["log4j"].pk).update(title="very long title " * 3000)
    text = " ".join(" ".join(p.extract_text().split()) for p in _pdf(api, team).pages)
    assert "very long title very long title" in text
    assert "(cut here: the CSV and JSON exports have it whole)" in text
    assert "End of the report: 2 of 2 findings listed" in text


def test_pdf_progress_is_reported_while_the_rows_are_drawn(team, data, monkeypatch):
    from trustrank.exports.services.params import ExportRequest
    from trustrank.exports.services.rows import export_selection

    bulk_findings(team, 30)
    rerank(team)
    seen: list[int] = []
    selection = export_selection(ExportRequest(format="pdf", team_id=team.pk))
    meta = {"team": {"id": team.pk, "name": team.name}, "filter": {},
            "audit_chain": {"intact": True, "events": 0}}
    monkeypatch.setattr(report_pdf, "TABLE_ROWS", 10)
    pdf = b"".join(report.report_pdf_chunks(selection, meta, seen.append))
    assert pdf.startswith(b"%PDF")
    assert seen == [10, 20, 30, 32, 32]


def test_277_findings_fit_in_about_twenty_pages(api, team, data):
    bulk_findings(team, 275)
    rerank(team)
    reader = _pdf(api, team)
    assert len(reader.pages) <= 22


def test_html_and_pdf_as_of(api, team, data, make_user):
    from trustrank.accounts.principal import principal_for_user
    from trustrank.findings.services.triage import finding_triage

    before = timezone.now()
    finding_triage(
        finding=data["log4j"], principal=principal_for_user(make_user("alice", team=team)),
        state="exploitable", reason="confirmed",
    )
    html = body_of(api(team, "read").get(
        "/api/v1/exports", {"format": "html", "as_of": before.isoformat()}
    )).decode()
    assert before.isoformat()[:19] in html and "exploitable" not in html
    reader = _pdf(api, team, as_of=before.isoformat())
    text = " ".join(p.extract_text() for p in reader.pages)
    assert before.isoformat()[:19] in text and "exploitable" not in text
    now = " ".join(p.extract_text() for p in _pdf(api, team).pages)
    assert "exploitable" in now


def test_html_report_has_every_field_and_the_checkpoint_line(api, team, data):
    html = body_of(api(team, "read").get("/api/v1/exports", {"format": "html"})).decode()
    assert "size: A4 landscape" in html
    for label in ("Rank", "Decision", "Score", "Vulnerability", "Title", "Component@version",
                  "Project / version", "Service", "Environment", "KEV", "EPSS", "CVSS",
                  "Status", "Due", "Why"):
        assert label in html
    assert "Last checkpoint" in html and "audit_checkpoint" in html


def test_a_pdf_above_its_stream_limit_is_a_job_not_made_in_the_request(api, team, data, settings):
    from trustrank.exports.models import Export

    settings.TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS = 1
    client = api(team, "read")
    response = client.get("/api/v1/exports", {"format": "pdf"})
    assert response.status_code == 202, body_of(response)[:500]
    body = response.json()
    assert body["status"] == "queued" and response["Location"] == body["status_url"]
    export = Export.objects.get(pk=body["id"])
    assert not export.streamed and export.format == "pdf" and not export.file_path
    # The limit is the PDF's: the same findings as HTML or CSV still come straight back.
    assert client.get("/api/v1/exports", {"format": "html"}).status_code == 200
    assert client.get("/api/v1/exports", {"format": "csv"}).status_code == 200
