"""The issue text built from an event's finding (pure: no database, no Jira)."""

from __future__ import annotations

from trustrank.jira.issues import (
    SUMMARY_MAX,
    comment_body,
    issue_description,
    issue_fields,
    issue_summary,
)


def test_the_summary_of_a_vulnerability_names_decision_id_component_and_rank():
    finding = {"id": 1, "decision": "scheduled", "vuln_id": "GHSA-xxxx", "component": "lodash",
               "version": "4.17.15", "rank": 12}
    assert issue_summary(finding) == "[TrustRank] scheduled GHSA-xxxx in lodash 4.17.15 (rank 12)"


def test_a_finding_of_another_kind_or_unranked_gives_its_title():
    finding = {"id": 9, "title": "Expired certificate for spiffe://x/web", "rank": None}
    assert issue_summary(finding) == "[TrustRank] unranked Expired certificate for spiffe://x/web"


def test_a_long_summary_is_cut_to_what_jira_takes():
    summary = issue_summary({"id": 1, "decision": "defer", "vuln_id": "CVE-1",
                             "component": "x" * 400, "version": "1", "rank": 3})
    assert len(summary) == SUMMARY_MAX and summary.endswith("…")


def test_markup_in_foreign_text_is_escaped_but_ids_stay_searchable():
    finding = {"id": 1, "vuln_id": "CVE-2021-44228", "title": "Bad {code} in [x|y]",
               "explanation": ["plain factor", {"name": "exposure", "value": "open"}],
               "url": "https://tr.example/findings/1/"}
    text = issue_description(event="finding.immediate", finding=finding)
    assert "Bad \\{code\\} in \\[x\\|y\\]" in text
    assert "CVE-2021-44228" in text and "* plain factor" in text and "*exposure*: open" in text
    assert "[Open the finding in TrustRank|https://tr.example/findings/1/]" in text


def test_fields_carry_priority_only_when_the_decision_is_mapped():
    finding = {"id": 1, "decision": "defer", "vuln_id": "CVE-1"}
    fields = issue_fields(event="e", finding=finding, project_key="SEC", issue_type="Bug",
                          priorities={"immediate": "Highest"})
    assert "priority" not in fields and fields["labels"] == ["trustrank", "defer"]
    fields = issue_fields(event="e", finding={**finding, "decision": "immediate"},
                          project_key="SEC", issue_type="Bug",
                          priorities={"immediate": "Highest"})
    assert fields["priority"] == {"name": "Highest"}


def test_a_comment_says_what_changed():
    body = comment_body(event="feed.kev_added", finding={"decision": "immediate", "rank": 1})
    assert body.startswith("CISA added this vulnerability to the KEV catalog")
    assert "*immediate*" in body and "rank 1" in body
