"""A bulk triage job's page says what it changes and which findings it selected as labelled
fields people read (state names, usernames, the filters' labels), never Python's repr."""

from __future__ import annotations

import re

import pytest

from tests.findings.helpers import many_findings
from trustrank.findings.models import Finding
from trustrank.findings.records import BulkTriageJob
from trustrank.jobs.runner import job_run

pytestmark = pytest.mark.django_db


def test_a_bulk_triage_job_page_shows_its_change_and_selection_as_fields(
    team, client, make_user, settings
):
    settings.TRUSTRANK_BULK_TRIAGE_SYNC_MAX = 1
    owner = make_user("owner", team=team, role="triager")
    ids = many_findings(team, 3, prefix="bulk")
    client.force_login(owner)
    response = client.post("/findings/bulk-triage", {
        "select_all": "1", "filter_query": "q=pkg-bulk&severity=high&severity=critical&kev=false",
        "state": "exploitable", "assignee": str(owner.pk), "clear_due_date": "1",
        "reason": "reachable from the edge",
    })
    job = BulkTriageJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/findings/bulk-triage/{job.pk}/"
    job_run(kind_name="bulk_triage", job_id=str(job.pk))
    assert Finding.objects.filter(pk__in=ids, state="exploitable").count() == 3

    html = client.get(f"/findings/bulk-triage/{job.pk}/").content.decode()
    changes = html[html.index('data-testid="bulk-changes"'):]
    changes = changes[: changes.index("</dd>\n")]
    assert "<dt>State</dt><dd>Exploitable</dd>" in changes
    assert "<dt>Assignee</dt><dd>owner</dd>" in changes
    assert "<dt>Due date</dt><dd>cleared</dd>" in changes
    selection = html[html.index('data-testid="bulk-selection"'):]
    selection = selection[: selection.index("</dd>\n")]
    assert "<dt>Search</dt><dd>pkg-bulk</dd>" in selection
    assert "<dt>Severity</dt><dd>high, critical</dd>" in selection
    assert "<dt>KEV</dt><dd>false</dd>" in selection
    for text in ("{&#x27;", "[&#x27;", "None", "True", "state=", "&#x27;:"):
        assert text not in html, text
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "done done" not in text and "3 changed" in text
