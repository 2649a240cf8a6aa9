"""What TrustRank sends to Jira, built from a notification event's JSON (the `payload` the
webhook worker hands to `jira_deliver`): the fields of a new issue and the text of a comment.

Jira's REST API v2 takes descriptions and comments in its wiki markup, so values that come
from elsewhere (advisory titles, component names) are escaped where the markup would read
them as formatting.
"""

from __future__ import annotations

from typing import Any

# Events about one finding: each creates the finding's issue, or comments on it once made.
FINDING_EVENTS = frozenset({"finding.immediate", "finding.decision_changed", "feed.kev_added"})

# Jira refuses a summary longer than this.
SUMMARY_MAX = 255
# Jira Cloud refuses a text field past 32,767 characters; stay well under.
DESCRIPTION_MAX = 30_000

# What would turn text into a macro, a link or a table cell. The inline marks (*bold*,
# -strike-) only apply in pairs around words and are left alone: escaping every "-" would
# make CVE-2021-44228 read CVE\-2021\-44228 in Jira's raw text and in its search.
_WIKI_SPECIAL = str.maketrans({c: f"\\{c}" for c in "{}[]|"})


def _wiki(text: Any) -> str:
    """Plain text as Jira wiki markup shows it literally (one line)."""
    return " ".join(str(text if text is not None else "").split()).translate(_WIKI_SPECIAL)


def _name(value: Any) -> str:
    """A payload field that may be a plain value or an object with a name."""
    if isinstance(value, dict):
        return str(value.get("name") or value.get("version") or value.get("id") or "")
    return "" if value is None else str(value)


def finding_of(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The finding an event is about, or None (job.failed, gate.failed…)."""
    finding = payload.get("finding")
    if not isinstance(finding, dict) or finding.get("id") is None:
        return None
    return finding


def issue_summary(finding: dict[str, Any]) -> str:
    """`[TrustRank] <decision> <vuln_id> in <component> <version> (rank N)`; a finding of
    another kind (no vuln_id) gives its title instead of "<vuln_id> in <component>"."""
    decision = _name(finding.get("decision")) or "unranked"
    vuln_id = _name(finding.get("vuln_id"))
    component = _name(finding.get("component"))
    version = _name(finding.get("version"))
    if vuln_id:
        what = f"{vuln_id} in {component} {version}".strip() if component else vuln_id
    else:
        what = _name(finding.get("title")) or f"finding {finding.get('id')}"
    rank = finding.get("rank")
    tail = f" (rank {rank})" if rank is not None else ""
    summary = " ".join(f"[TrustRank] {decision} {what}{tail}".split())
    if len(summary) > SUMMARY_MAX:
        summary = summary[: SUMMARY_MAX - 1].rstrip() + "…"
    return summary


def _factor_line(factor: Any) -> str:
    if not isinstance(factor, dict):
        return _wiki(factor)
    name = _wiki(factor.get("name") or factor.get("factor") or "factor")
    text = f"*{name}*: {_wiki(factor.get('value'))}"
    notes = []
    if factor.get("effect") is not None:
        notes.append(f"effect {_wiki(factor['effect'])}")
    for key in ("source", "confidence"):
        if factor.get(key):
            notes.append(f"{key} {_wiki(factor[key])}")
    return f"{text} ({', '.join(notes)})" if notes else text


def issue_description(*, event: str, finding: dict[str, Any]) -> str:
    """The issue's body: what the finding is, where, its rank and every factor of it, and a
    link back to the finding in TrustRank."""
    lines = [
        "Opened from TrustRank for this finding." if event == "manual"
        else f"TrustRank reported this finding ({_wiki(event)})."
    ]
    if finding.get("title"):
        lines += ["", _wiki(finding["title"])]
    lines.append("")
    rows = [
        ("Vulnerability", finding.get("vuln_id")),
        ("Component", " ".join(p for p in (_name(finding.get("component")),
                                           _name(finding.get("version"))) if p)),
        ("Project", " ".join(p for p in (_name(finding.get("project")),
                                         _name(finding.get("project_version"))) if p)),
        ("Service", _name(finding.get("service"))),
        ("Environment", _name(finding.get("environment"))),
        ("Decision (SSVC)", finding.get("decision")),
        ("Rank", finding.get("rank")),
        ("Score", finding.get("score")),
    ]
    lines += [f"||{label}|{_wiki(value)}|" for label, value in rows if value not in (None, "")]
    explanation = finding.get("explanation") or []
    if isinstance(explanation, list) and explanation:
        lines += ["", "h3. Why it ranks here", ""]
        lines += [f"* {_factor_line(factor)}" for factor in explanation]
    url = finding.get("url")
    if url:
        lines += ["", f"[Open the finding in TrustRank|{str(url).translate(_LINK_SPECIAL)}]"]
    text = "\n".join(lines)
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 1] + "…"


# A link target ends at "|" or "]": percent-encode them (and spaces) inside a URL.
_LINK_SPECIAL = str.maketrans({"|": "%7C", "]": "%5D", "[": "%5B", " ": "%20"})


def issue_fields(
    *,
    event: str,
    finding: dict[str, Any],
    project_key: str,
    issue_type: str,
    priorities: dict[str, str],
) -> dict[str, Any]:
    """The `fields` of `POST /rest/api/2/issue` for a finding."""
    decision = _name(finding.get("decision"))
    fields: dict[str, Any] = {
        "project": {"key": project_key},
        "summary": issue_summary(finding),
        "description": issue_description(event=event, finding=finding),
        "issuetype": {"name": issue_type},
        # Jira labels may not contain spaces.
        "labels": ["trustrank", *([decision.replace(" ", "-")] if decision else [])],
    }
    priority = priorities.get(decision) if decision else None
    if priority:
        fields["priority"] = {"name": priority}
    return fields


def comment_body(*, event: str, finding: dict[str, Any]) -> str:
    """A comment on the finding's existing issue for a later event about it."""
    decision = _name(finding.get("decision")) or "unranked"
    rank = finding.get("rank")
    what = {
        "finding.decision_changed": "The TrustRank decision changed",
        "finding.immediate": "TrustRank ranks this finding immediate",
        "feed.kev_added": "CISA added this vulnerability to the KEV catalog",
    }.get(event, f"TrustRank event {event}")
    text = f"{_wiki(what)}: decision *{_wiki(decision)}*"
    if rank is not None:
        text += f", rank {_wiki(rank)}"
    if finding.get("score") is not None:
        text += f", score {_wiki(finding['score'])}"
    url = finding.get("url")
    if url:
        text += f".\n[Open the finding in TrustRank|{str(url).translate(_LINK_SPECIAL)}]"
    return text
