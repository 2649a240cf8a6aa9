"""CVSS base scores (the `cvss` library computes them) and severity labels."""

from __future__ import annotations

from dataclasses import dataclass

from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError


@dataclass(frozen=True, slots=True)
class Score:
    type: str  # CVSS_V2 | CVSS_V3 | CVSS_V4 | other
    vector: str
    base_score: float | None
    error: str = ""


def score_vector(*, type: str, vector: str) -> Score:
    vector = vector.strip()
    try:
        if vector.startswith("CVSS:4"):
            return Score("CVSS_V4", vector, float(CVSS4(vector).base_score))
        if vector.startswith("CVSS:3"):
            return Score("CVSS_V3", vector, float(CVSS3(vector).base_score))
        if type == "CVSS_V2":
            return Score("CVSS_V2", vector, float(CVSS2(vector).base_score))
    except (CVSSError, ValueError, KeyError) as exc:
        return Score(type, vector, None, error=f"invalid CVSS vector: {exc}")
    return Score(type, vector, None)


def best_score(scores: list[Score]) -> float | None:
    """The score shown as "the" CVSS: v3.x first (what KEV, EPSS and most tools quote), then
    v4, then v2."""
    for wanted in ("CVSS_V3", "CVSS_V4", "CVSS_V2"):
        for s in scores:
            if s.type == wanted and s.base_score is not None:
                return s.base_score
    return None


def severity_label(score: float | None, fallback: str = "") -> str:
    """CVSS v3 qualitative rating; without a score, the database's own label if it has one."""
    if score is None:
        label = (fallback or "").strip().lower()
        return (
            {"moderate": "medium", "important": "high"}.get(label, label)
            if label in {"critical", "high", "moderate", "medium", "important", "low", "none"}
            else "unknown"
        )
    if score >= 9.0:
        return "critical"
    if score >= 7.0:
        return "high"
    if score >= 4.0:
        return "medium"
    if score > 0.0:
        return "low"
    return "none"
