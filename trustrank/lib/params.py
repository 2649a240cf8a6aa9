"""A job's parameters as a person reads them: a human label and a plain text per key, never
Python's repr ("{'a': 1}", "True", "None") or raw JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Labels of the keys jobs store (ingest receivers, bulk triage, the findings filters); any
# other key is spelled out from its name ("cluster_label" -> "Cluster label").
PARAM_LABELS = {
    "projectName": "Project",
    "projectVersion": "Version",
    "project": "Project",
    "autoCreate": "Create the project if missing",
    "environment": "Environment",
    "service": "Service",
    "namespace": "Namespace",
    "human_impact": "Human impact",
    "encoding": "Encoding",
    "spans": "Spans",
    "observed": "Observed at",
    "certificates": "Certificates",
    "trust_domain": "Trust domain",
    "trust_domains": "Trust domains",
    "anchors": "Trust anchors",
    "format": "Format",
    "feed": "Feed",
    "allow_shrink": "Accept a smaller feed",
    "cluster": "Cluster",
    "cluster_label": "Cluster label",
    "media_type": "Media type",
    "q": "Search",
    "open": "Show",
    "kev": "In CISA KEV",
    "epss_min": "EPSS from",
    "epss_max": "EPSS to",
    "match_status": "Match status",
    "due_before": "Due before",
    "due_date": "Due date",
    "project_version": "Project version",
    "assignee": "Assignee",
    "state": "State",
    "justification": "Justification",
}
EMPTY = "—"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def param_label(name: str) -> str:
    if name in PARAM_LABELS:
        return PARAM_LABELS[name]
    words = _CAMEL.sub(" ", name).replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:].lower() if words else name


def param_text(value: Any) -> str:
    """yes/no for booleans, lists joined with commas, mappings as "key: value; …"."""
    if value is None or value == "" or value == [] or value == {}:
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return "; ".join(f"{param_label(str(k))}: {param_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(param_text(v) for v in value)
    return str(value)


def param_rows(params: Any, labels: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(label, text) per key of a job's parameters, in their stored order."""
    if not isinstance(params, Mapping):
        return [] if params in (None, "") else [("Value", param_text(params))]
    labels = labels or {}
    return [
        (labels.get(str(k)) or param_label(str(k)), param_text(v)) for k, v in params.items()
    ]
