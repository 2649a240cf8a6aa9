"""Applying a VEX document (`parsers.vex.VexDocument`) to the vulnerability findings of one
project version: each statement becomes the triage (state, justification, response, detail)
of the findings it names, with one `state_changed` audit event per changed finding, authored
by whoever sent the document (its API key), and one `vex_imported` event for the document.

Which findings a statement names: those of the project version whose advisory id, CVE or
aliases share an id with the statement's vulnerability (its name and aliases) and whose
component is one of the statement's products, by purl (type, namespace and name compared
case-insensitively, qualifiers and subpath ignored, any version when the statement's purl has
none), by bom-ref, or by name and version. A statement without products, or whose product is
the project version itself (the document's `metadata.component`, the SBOM's described
component, or `urn:uuid:<project version uuid>`), names every component.

Rules: a statement that names no finding is reported as unmatched, never an error; when
several statements name one finding the last in the document wins. The caller runs this in
one transaction (the ingest job's): all statements are applied, or none.

A VEX document is someone's analysis, so `not_affected` without a justification is taken as
it is (CycloneDX allows it; OpenVEX allows an impact statement instead), unlike a change made
in TrustRank, which must give one.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from django.db import connection
from django.utils import timezone

from trustrank.findings.choices import FindingKind
from trustrank.findings.models import Finding
from trustrank.findings.services.audit import Actor, audit_events_record_bulk
from trustrank.findings.services.reconcile import state_of
from trustrank.findings.services.triage import triage_apply
from trustrank.inventory.models import ProjectVersion
from trustrank.parsers.vex import VexDocument, VexProduct, VexStatement

UNMATCHED_CAP = 100
BATCH_SIZE = 1000
_TRIAGE_COLUMNS = ["state", "justification", "response", "detail", "auto_resolved",
                   "resolved_at", "updated_at", "version"]
_FIELDS = ("id", "vuln_id", "cve_id", "aliases", "component_purl", "component_name",
           "component_version", "component__bom_ref", "state", "justification", "response",
           "detail")


@dataclass
class VexApplyResult:
    statements: int = 0
    applied: int = 0  # findings whose triage changed
    unchanged: int = 0  # findings named that already had that triage
    unmatched: list[dict[str, Any]] = field(default_factory=list)  # statements naming none

    def as_dict(self) -> dict[str, Any]:
        return {
            "statements": self.statements,
            "applied": self.applied,
            "unchanged": self.unchanged,
            "unmatched": len(self.unmatched),
            "unmatched_statements": self.unmatched[:UNMATCHED_CAP],
        }


PurlKey = tuple[str, str, str, str | None]


@functools.lru_cache(maxsize=65536)
def purl_key(purl: str) -> PurlKey | None:
    """What two purls must share to name one package version (None for what is no purl).
    Read by the purl spec's own steps (scheme, then `#subpath`, `?qualifiers`, `@version`
    split off from the right); packageurl's full parse cost 150 µs a purl, and a document of
    thousands of statements is read against thousands of findings."""
    if not purl.startswith("pkg:"):
        return None
    rest = purl[4:].lstrip("/").split("#", 1)[0].split("?", 1)[0].rstrip("/")
    version: str | None = None
    if "@" in rest.rsplit("/", 1)[-1]:
        rest, raw = rest.rsplit("@", 1)
        version = unquote(raw) or None
    parts = rest.split("/")
    if len(parts) < 2 or not parts[0] or not parts[-1]:
        return None
    kind = parts[0].lower()
    name = unquote(parts[-1]).lower()
    if kind == "pypi":
        name = re.sub(r"[-_.]+", "-", name)
    namespace = "/".join(unquote(p) for p in parts[1:-1]).lower()
    return (kind, namespace, name, version)


def _project_refs(pv: ProjectVersion, doc: VexDocument) -> tuple[set[str], set[PurlKey]]:
    """The refs and purls that name the project version itself."""
    refs = {f"urn:uuid:{pv.uuid}", *doc.product_refs}
    keys: set[PurlKey] = set()
    sbom = pv.current_sbom
    described = (sbom.described_component or {}) if sbom is not None else {}
    for value in (described.get("bom-ref"), described.get("purl")):
        if value:
            refs.add(str(value))
    key = purl_key(str(described.get("purl") or ""))
    if key is not None:
        keys.add(key)
    return refs, keys


class _Index:
    """The project version's vulnerability findings, by id and by component."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            row["_purl_key"] = purl_key(row["component_purl"])
            ids = {row["vuln_id"], row["cve_id"], *(row["aliases"] or [])}
            for vid in ids:
                if vid:
                    self.by_id[vid.upper()].append(row)

    def candidates(self, s: VexStatement) -> list[dict[str, Any]]:
        seen: dict[int, dict[str, Any]] = {}
        for vid in (s.vulnerability, *s.aliases):
            for row in self.by_id.get(vid.upper(), ()):
                seen[row["id"]] = row
        return list(seen.values())


def _names(product: VexProduct, row: dict[str, Any]) -> bool:
    if product.purl:
        key, have = purl_key(product.purl), row["_purl_key"]
        if key is not None and have is not None and key[:3] == have[:3] and (
            key[3] is None or key[3] == have[3]
        ):
            return True
    if product.ref and product.ref in (row["component__bom_ref"], row["component_purl"]):
        return True
    return bool(
        product.name and product.name == row["component_name"]
        and product.version == row["component_version"]
    )


def _is_project(product: VexProduct, refs: set[str], keys: set[PurlKey]) -> bool:
    if product.ref in refs or (product.purl and product.purl in refs):
        return True
    key = purl_key(product.purl)
    return key is not None and any(
        key[:3] == k[:3] and (key[3] is None or key[3] == k[3]) for k in keys
    )


def _named(
    s: VexStatement, candidates: list[dict[str, Any]], refs: set[str], keys: set[PurlKey]
) -> list[dict[str, Any]]:
    if not s.products or any(_is_project(p, refs, keys) for p in s.products):
        return candidates
    return [row for row in candidates if any(_names(p, row) for p in s.products)]


def _wanted(s: VexStatement) -> dict[str, Any]:
    return {
        "state": s.state,
        "justification": s.justification,
        "response": list(s.response),
        "detail": s.detail,
    }


def _reason(doc: VexDocument, s: VexStatement, label: str) -> str:
    said = s.source_status + (f" ({s.source_justification})" if s.source_justification else "")
    return f"VEX {label}: statement {s.index + 1}, {s.vulnerability} {said}"[:2000]


def findings_vex_apply(
    *,
    project_version: ProjectVersion,
    doc: VexDocument,
    actor: Actor,
    ref: str,
    label: str = "",
) -> VexApplyResult:
    """Apply the document's statements to the project version's findings (see the module's
    docstring). `ref` names the import in the audit events (the ingest job); `label` names
    the document in their reasons. Run inside the caller's transaction."""
    pv = project_version
    label = label or doc.id or doc.format
    result = VexApplyResult(statements=len(doc.statements) + len(doc.skipped))
    for s in doc.skipped:
        result.unmatched.append({**s.summary(), "reason": "no analysis state"})
    rows = list(
        Finding.objects.filter(
            team_id=pv.project.team_id, project_version=pv, kind=FindingKind.VULNERABILITY
        ).values(*_FIELDS)
    )
    index = _Index(rows)
    refs, keys = _project_refs(pv, doc)
    chosen: dict[int, VexStatement] = {}
    for s in doc.statements:
        named = _named(s, index.candidates(s), refs, keys)
        if not named:
            result.unmatched.append({**s.summary(), "reason": "no finding of this project "
                                     "version has this vulnerability and component"})
            continue
        for row in named:
            chosen[row["id"]] = s  # the last statement about a finding wins
    by_id = {row["id"]: row for row in rows}
    to_change = []
    for finding_id, s in chosen.items():
        row = by_id[finding_id]
        have = {k: row[k] for k in ("state", "justification", "detail")}
        have["response"] = list(row["response"] or [])
        if have == _wanted(s):
            result.unchanged += 1
        else:
            to_change.append(finding_id)
    ids = sorted(to_change)
    for start in range(0, len(ids), BATCH_SIZE):
        result.applied += _apply_batch(
            ids=ids[start : start + BATCH_SIZE], chosen=chosen, doc=doc, actor=actor,
            ref=ref, label=label,
        )
    result.unchanged += len(to_change) - result.applied
    audit_events_record_bulk([
        actor.event(
            action="vex_imported",
            team_id=pv.project.team_id,
            subject_type="vex",
            subject_id=ref,
            after={
                "format": doc.format,
                "document": doc.id,
                "project_version": str(pv.uuid),
                **{k: v for k, v in result.as_dict().items() if k != "unmatched_statements"},
            },
            reason=f"VEX {label} applied to {pv.project.name} {pv.version}"[:2000],
        )
    ])
    return result


def _apply_batch(
    *, ids: list[int], chosen: dict[int, VexStatement], doc: VexDocument, actor: Actor,
    ref: str, label: str,
) -> int:
    """Lock the batch's rows (in id order), change those that still differ, write their
    events. Returns how many changed."""
    now = timezone.now()
    locked = list(
        Finding.objects.select_for_update(of=("self",))
        .filter(pk__in=ids)
        .select_related("due")
        .order_by("pk")
        .only("pk", "team_id", "environment", "assignee_id", "due", *_TRIAGE_COLUMNS)
    )
    changed: list[Finding] = []
    events = []
    for f in locked:
        s = chosen[f.pk]
        wanted = _wanted(s)
        if (f.state, f.justification, list(f.response or []), f.detail) == (
            wanted["state"], wanted["justification"], wanted["response"], wanted["detail"]
        ):
            continue
        before = state_of(f)
        triage_apply(f, now=now, **wanted)
        changed.append(f)
        events.append(
            actor.event(
                action="state_changed",
                team_id=f.team_id,
                finding_id=f.pk,
                subject_type="vex",
                subject_id=ref,
                environment=f.environment,
                before=before,
                after=state_of(f),
                reason=_reason(doc, s, label),
                at=now,
            )
        )
    if changed:
        _update(changed, now=now)
        audit_events_record_bulk(events)
    return len(changed)


def _update(changed: list[Finding], *, now: Any) -> None:
    """One UPDATE … FROM unnest(…) for the batch: each row gets its own values (Django's
    bulk_update builds a CASE per column and row, 45 s of Python for 5,000 findings)."""
    table = connection.ops.quote_name(Finding._meta.db_table)
    sql = (
        f"UPDATE {table} AS f SET state = v.state, justification = v.justification, "  # noqa: S608 - the table's own name
        "response = v.response::jsonb, detail = v.detail, auto_resolved = false, "
        "resolved_at = v.resolved_at, updated_at = %s, version = v.version "
        "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[], "
        "%s::timestamptz[], %s::integer[]) "
        "AS v(id, state, justification, response, detail, resolved_at, version) "
        "WHERE f.id = v.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [
            now,
            [f.pk for f in changed],
            [f.state for f in changed],
            [f.justification for f in changed],
            [json.dumps(list(f.response or [])) for f in changed],
            [f.detail for f in changed],
            [f.resolved_at for f in changed],
            [f.version for f in changed],
        ])
