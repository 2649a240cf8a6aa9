"""Big exports run as jobs on a real Celery worker; the streaming path stays small in memory;
the exports page and the findings list's Export link."""

from __future__ import annotations

import hashlib
import tracemalloc

import pytest

from tests.conftest import wait_for
from tests.exports.helpers import body_of, bulk_findings, csv_rows
from trustrank.exports.models import Export
from trustrank.findings.records import AuditEvent


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_big_export_runs_as_a_job_with_progress_and_a_download(
    api, team, other_team, start_worker, settings, tmp_path
):
    settings.TRUSTRANK_EXPORT_STREAM_MAX_ROWS = 100
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "exports"
    bulk_findings(team, 2500)
    bulk_findings(other_team, 10, prefix="theirs")
    start_worker(TRUSTRANK_EXPORT_DIR=str(tmp_path / "exports"))
    client = api(team, "read")
    response = client.get("/api/v1/exports", {"format": "csv", "severity": "high"})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and body["status_url"] == f"/api/v1/exports/{body['id']}"
    assert response["Location"] == body["status_url"]

    def finished():
        status = client.get(body["status_url"]).json()
        return status if status["status"] in ("done", "failed") else None

    status = wait_for(finished, timeout=120, interval=0.3)
    assert status["status"] == "done", status["error"]
    assert status["progress_total"] == 2500 and status["progress_done"] == 2500
    assert status["rows"] == 2500
    download = client.get(status["download_url"])
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment;")
    data = body_of(download)
    assert hashlib.sha256(data).hexdigest() == status["sha256"]
    rows = csv_rows(data)
    assert len(rows) == 2500 and not any(r["title"].startswith("theirs") for r in rows)
    event = AuditEvent.objects.get(action="export", subject_id=str(body["id"]))
    assert event.after["sha256"] == status["sha256"] and event.after["rows"] == 2500
    # Another team's key cannot read its status or its file.
    theirs = api(other_team, "read")
    assert theirs.get(body["status_url"]).status_code == 404
    assert theirs.get(status["download_url"]).status_code == 404


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_big_pdf_report_is_made_by_the_worker(api, team, start_worker, settings, tmp_path):
    """A PDF above TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS is never drawn in the request: the
    export job draws it on a real worker, with progress, and the file is served."""
    import io

    from pypdf import PdfReader

    settings.TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS = 50
    settings.TRUSTRANK_EXPORT_DIR = tmp_path / "exports"
    bulk_findings(team, 120)
    start_worker(TRUSTRANK_EXPORT_DIR=str(tmp_path / "exports"))
    client = api(team, "read")
    response = client.get("/api/v1/exports", {"format": "pdf"})
    assert response.status_code == 202, response.content
    body = response.json()

    def finished():
        status = client.get(body["status_url"]).json()
        return status if status["status"] in ("done", "failed") else None

    status = wait_for(finished, timeout=120, interval=0.3)
    assert status["status"] == "done", status["error"]
    assert status["progress_total"] == 120 and status["progress_done"] == 120
    data = body_of(client.get(status["download_url"]))
    assert hashlib.sha256(data).hexdigest() == status["sha256"]
    reader = PdfReader(io.BytesIO(data))
    total = len(reader.pages)
    text = " ".join(p.extract_text() for p in reader.pages)
    assert total >= 3 and f"page {total} of {total}" in text
    assert "bulk finding 119" in text and "End of the report: 120 of 120 findings" in text
    assert float(reader.pages[0].mediabox.width) > float(reader.pages[0].mediabox.height)


@pytest.mark.django_db(transaction=True)
def test_streaming_never_holds_the_findings(api, team):
    """20,000 findings stream through a server-side cursor: peak Python memory stays far
    below what holding the rows would take (about 1 KiB each, ~20 MB)."""
    bulk_findings(team, 20_000)
    response = api(team, "read").get("/api/v1/exports", {"format": "csv"})
    assert response.status_code == 200
    tracemalloc.start()
    size = 0
    lines = 0
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += chunk.count(b"\n")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    response.close()
    assert lines == 20_001
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for {size / 1e6:.1f} MB of CSV"


@pytest.mark.django_db
def test_exports_page_starts_a_job_with_the_carried_filters(client, make_user, team):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    page = client.get("/exports/", {"severity": "high", "kev": "true"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="kev" value="true"' in html and 'value="high" selected' in html
    response = client.post(
        "/exports/", {"format": "json", "severity": "high", "kev": "true"}
    )
    export = Export.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/exports/{export.pk}/"
    assert export.filter_params == {"severity": ["high"], "kev": ["true"]}
    assert export.status == "queued" and not export.streamed
    detail = client.get(f"/exports/{export.pk}/")
    assert "hx-trigger=\"every 1s\"" in detail.content.decode()
    fragment = client.get(f"/exports/{export.pk}/", HTTP_HX_REQUEST="true")
    assert "<html" not in fragment.content.decode()


@pytest.mark.django_db
def test_exports_page_refuses_a_bad_filter(client, make_user, team):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    response = client.post("/exports/", {"format": "csv", "severity": "apocalyptic"}, follow=True)
    assert "severity" in response.content.decode()
    assert not Export.objects.exists()


@pytest.mark.django_db
def test_findings_list_has_an_export_link_with_its_filters(client, make_user, team):
    make_user("alice", team=team)
    client.login(username="alice", password="pw-alice")
    html = client.get("/findings/", {"severity": "critical", "kind": "vulnerability"}).content
    assert b'href="/exports/?severity=critical&amp;kind=vulnerability"' in html


@pytest.mark.django_db
def test_other_teams_export_page_is_404(client, make_user, team, other_team):
    make_user("alice", team=team)
    theirs = Export.objects.create(team=other_team, format="csv")
    client.login(username="alice", password="pw-alice")
    assert client.get(f"/exports/{theirs.pk}/").status_code == 404
    assert client.get(f"/exports/{theirs.pk}/download").status_code == 404
