"""Exports: the printable report as of a past time, and request values that must be refused
with a 400 naming them (never a 500)."""

from __future__ import annotations

import io

import pytest
from django.utils import timezone

from tests.exports.helpers import body_of, ranked_scenario
from trustrank.accounts.principal import principal_for_user
from trustrank.findings.services.triage import finding_triage

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(team, make_user):
    built = ranked_scenario(team)
    alice = make_user("alice", team=team)
    before = timezone.now()
    finding_triage(
        finding=built["log4j"], principal=principal_for_user(alice), state="exploitable",
        reason="confirmed",
    )
    return {**built, "before": before}


def test_html_report_as_of_counts_the_states_of_that_time(api, team, data):
    response = api(team, "read").get(
        "/api/v1/exports", {"format": "html", "as_of": data["before"].isoformat()}
    )
    assert response.status_code == 200, body_of(response)[:2000]
    html = body_of(response).decode()
    assert "CVE-2021-44228" in html
    # Then, log4j was still in triage: nothing was exploitable yet.
    assert "exploitable" not in html.split("CVE-2021-44228")[0]
    now = body_of(api(team, "read").get("/api/v1/exports", {"format": "html"})).decode()
    assert "exploitable" in now


def test_pdf_report_as_of_is_made(api, team, data):
    from pypdf import PdfReader

    response = api(team, "read").get(
        "/api/v1/exports", {"format": "pdf", "as_of": data["before"].isoformat()}
    )
    assert response.status_code == 200, body_of(response)[:2000]
    body = body_of(response)
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(body)).pages)
    assert "CVE-2021-44228" in text


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"format": "csv", "assignee": "²"}, "assignee"),
        ({"format": "csv", "team": "²"}, "team"),
        ({"format": "csv", "team": "٣"}, "team"),
        ({"format": "csv", "ranking_run": "99999999999999999999999"}, "ranking_run"),
        # A project may be named ("²" is a name, matching nothing), but not at any length.
        ({"format": "csv", "project": "x" * 600}, "project"),
        ({"format": "csv", "severty": "low"}, "severty"),
    ],
)
def test_unusable_numbers_and_unknown_filters_are_refused_naming_them(
    api, team, data, params, param
):
    response = api(team, "read").get("/api/v1/exports", params)
    assert response.status_code == 400, body_of(response)[:500]
    assert response.json()["param"] == param
