"""The `vulnerabilities` array of a CycloneDX BOM (VDR/VEX), JSON or XML, as plain data.

Only what findings need: the id and its aliases (references), ratings, description, the
affected bom-refs and the VEX `analysis` (state, justification, response, detail).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from lxml import etree

VEX_STATES = (
    "resolved",
    "resolved_with_pedigree",
    "exploitable",
    "in_triage",
    "false_positive",
    "not_affected",
)
VEX_JUSTIFICATIONS = (
    "code_not_present",
    "code_not_reachable",
    "requires_configuration",
    "requires_dependency",
    "requires_environment",
    "protected_by_compiler",
    "protected_at_runtime",
    "protected_at_perimeter",
    "protected_by_mitigating_control",
)
VEX_RESPONSES = ("can_not_fix", "will_not_fix", "update", "rollback", "workaround_available")


class CycloneDxVulnsError(ValueError):
    pass


@dataclass(frozen=True)
class Rating:
    score: float | None
    severity: str
    method: str
    vector: str
    source: str


@dataclass(frozen=True)
class Analysis:
    state: str
    justification: str = ""
    response: tuple[str, ...] = ()
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "justification": self.justification,
            "response": list(self.response),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class EmbeddedVulnerability:
    id: str
    source: str
    aliases: tuple[str, ...]
    description: str
    detail: str
    recommendation: str
    ratings: tuple[Rating, ...]
    cwes: tuple[int, ...]
    advisories: tuple[str, ...]
    affects: tuple[str, ...]  # bom-refs (the fragment of a BOM-Link)
    analysis: Analysis | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def best_score(self) -> float | None:
        scores = [r.score for r in self.ratings if r.score is not None]
        return max(scores) if scores else None

    @property
    def best_severity(self) -> str:
        order = ["critical", "high", "medium", "low", "info", "none"]
        labels = [r.severity.lower() for r in self.ratings if r.severity]
        for label in order:
            if label in labels:
                return label
        return ""


def _ref(value: str) -> str:
    # A BOM-Link (urn:cdx:<serial>/<version>#<bom-ref>) points at a bom-ref in a BOM.
    value = value.strip()
    if value.startswith("urn:cdx:") and "#" in value:
        return value.split("#", 1)[1]
    return value


def _analysis(state: str, justification: str, response: list[str], detail: str) -> Analysis | None:
    if not state:
        return None
    if state not in VEX_STATES:
        raise CycloneDxVulnsError(
            f"analysis.state {state!r} is not a CycloneDX VEX state ({', '.join(VEX_STATES)})"
        )
    return Analysis(
        state=state, justification=justification, response=tuple(response), detail=detail
    )


def _float(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def from_json(doc: dict[str, Any]) -> list[EmbeddedVulnerability]:
    out = []
    for i, v in enumerate(doc.get("vulnerabilities") or []):
        if not isinstance(v, dict):
            raise CycloneDxVulnsError(f"vulnerabilities[{i}] is not an object")
        vid = str(v.get("id") or "").strip()
        if not vid:
            continue
        analysis = v.get("analysis") or {}
        out.append(
            EmbeddedVulnerability(
                id=vid,
                source=str((v.get("source") or {}).get("name") or ""),
                aliases=tuple(str(r.get("id")) for r in v.get("references") or [] if r.get("id")),
                description=str(v.get("description") or ""),
                detail=str(v.get("detail") or ""),
                recommendation=str(v.get("recommendation") or ""),
                ratings=tuple(
                    Rating(
                        score=_float(r.get("score")),
                        severity=str(r.get("severity") or ""),
                        method=str(r.get("method") or ""),
                        vector=str(r.get("vector") or ""),
                        source=str((r.get("source") or {}).get("name") or ""),
                    )
                    for r in v.get("ratings") or []
                ),
                cwes=tuple(
                    int(c) for c in v.get("cwes") or [] if str(c).isascii() and str(c).isdigit()
                ),
                advisories=tuple(
                    str(a.get("url")) for a in v.get("advisories") or [] if a.get("url")
                ),
                affects=tuple(
                    _ref(str(a.get("ref"))) for a in v.get("affects") or [] if a.get("ref")
                ),
                analysis=_analysis(
                    str(analysis.get("state") or ""),
                    str(analysis.get("justification") or ""),
                    [str(r) for r in analysis.get("response") or []],
                    str(analysis.get("detail") or ""),
                ),
                raw=v,
            )
        )
    return out


def _local(tag: Any) -> str:
    return etree.QName(tag).localname if isinstance(tag, str) else ""


def _child(el: Any, name: str) -> Any | None:
    for c in el:
        if _local(c.tag) == name:
            return c
    return None


def _children(el: Any | None, name: str) -> list[Any]:
    return [] if el is None else [c for c in el if _local(c.tag) == name]


def _text(el: Any | None, name: str) -> str:
    c = None if el is None else _child(el, name)
    return (c.text or "").strip() if c is not None else ""


def _xml_to_dict(el: Any) -> dict[str, Any]:
    """A loose JSON rendering of an XML vulnerability, kept as evidence."""
    out: dict[str, Any] = dict(el.attrib)
    for c in el:
        name = _local(c.tag)
        value: Any = _xml_to_dict(c) if len(c) else (c.text or "").strip()
        if name in out:
            if not isinstance(out[name], list):
                out[name] = [out[name]]
            out[name].append(value)
        else:
            out[name] = value
    return out


def from_xml(root: Any) -> list[EmbeddedVulnerability]:
    out = []
    for vulns in _children(root, "vulnerabilities"):
        for v in _children(vulns, "vulnerability"):
            vid = _text(v, "id")
            if not vid:
                continue
            analysis = _child(v, "analysis")
            affects = _child(v, "affects")
            out.append(
                EmbeddedVulnerability(
                    id=vid,
                    source=_text(_child(v, "source"), "name"),
                    aliases=tuple(
                        _text(r, "id")
                        for r in _children(_child(v, "references"), "reference")
                        if _text(r, "id")
                    ),
                    description=_text(v, "description"),
                    detail=_text(v, "detail"),
                    recommendation=_text(v, "recommendation"),
                    ratings=tuple(
                        Rating(
                            score=_float(_text(r, "score")),
                            severity=_text(r, "severity"),
                            method=_text(r, "method"),
                            vector=_text(r, "vector"),
                            source=_text(_child(r, "source"), "name"),
                        )
                        for r in _children(_child(v, "ratings"), "rating")
                    ),
                    cwes=tuple(
                        int(c.text)
                        for c in _children(_child(v, "cwes"), "cwe")
                        if (c.text or "").strip().isascii() and (c.text or "").strip().isdigit()
                    ),
                    advisories=tuple(
                        _text(a, "url")
                        for a in _children(_child(v, "advisories"), "advisory")
                        if _text(a, "url")
                    ),
                    affects=tuple(
                        _ref(_text(t, "ref"))
                        for t in _children(affects, "target")
                        if _text(t, "ref")
                    ),
                    analysis=None
                    if analysis is None
                    else _analysis(
                        _text(analysis, "state"),
                        _text(analysis, "justification"),
                        [
                            (r.text or "").strip()
                            for r in _children(_child(analysis, "responses"), "response")
                        ],
                        _text(analysis, "detail"),
                    ),
                    raw=_xml_to_dict(v),
                )
            )
    return out


def parse_vulnerabilities(data: bytes) -> list[EmbeddedVulnerability]:
    """The vulnerabilities of a CycloneDX document, JSON or XML (sniffed)."""
    head = data.lstrip()[:1]
    if head == b"<":
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
        try:
            root = etree.fromstring(data, parser=parser)
        except etree.XMLSyntaxError as exc:
            raise CycloneDxVulnsError(f"not well-formed XML: {exc}") from exc
        return from_xml(root)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CycloneDxVulnsError(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CycloneDxVulnsError("a CycloneDX JSON document must be an object")
    return from_json(doc)


# --- stored form -------------------------------------------------------------------------------
# The vulnerabilities are parsed once, when the SBOM is loaded, and kept with it as JSON
# (inventory.Sbom.vulnerabilities); matching reads them back from there, never from the raw
# upload.


def vulnerability_to_json(v: EmbeddedVulnerability) -> dict[str, Any]:
    return {
        "id": v.id,
        "source": v.source,
        "aliases": list(v.aliases),
        "description": v.description,
        "detail": v.detail,
        "recommendation": v.recommendation,
        "ratings": [
            {
                "score": r.score,
                "severity": r.severity,
                "method": r.method,
                "vector": r.vector,
                "source": r.source,
            }
            for r in v.ratings
        ],
        "cwes": list(v.cwes),
        "advisories": list(v.advisories),
        "affects": list(v.affects),
        "analysis": v.analysis.as_dict() if v.analysis is not None else None,
        "raw": v.raw,
    }


def vulnerability_from_json(d: dict[str, Any]) -> EmbeddedVulnerability:
    analysis = d.get("analysis")
    return EmbeddedVulnerability(
        id=d["id"],
        source=d.get("source", ""),
        aliases=tuple(d.get("aliases") or ()),
        description=d.get("description", ""),
        detail=d.get("detail", ""),
        recommendation=d.get("recommendation", ""),
        ratings=tuple(Rating(**r) for r in d.get("ratings") or ()),
        cwes=tuple(d.get("cwes") or ()),
        advisories=tuple(d.get("advisories") or ()),
        affects=tuple(d.get("affects") or ()),
        analysis=(
            Analysis(
                state=analysis["state"],
                justification=analysis.get("justification", ""),
                response=tuple(analysis.get("response") or ()),
                detail=analysis.get("detail", ""),
            )
            if analysis
            else None
        ),
        raw=d.get("raw") or {},
    )
