"""Per-finding facts and factors: exploitation, automatable, severity, the one-queue table
for identity and reliability findings, and the factor values the score adds up.

The score is `50 + Σ weight·(value − 0.5)` over the factors in `ScoreWeights`, each value
in [0, 1] and growing with urgency, so raising any factor never lowers the score and an
unknown factor (value 0.5) moves nothing (an unknown System Exposure is the exception: it
reads as `RankSettings.unknown_exposure`, open, everywhere). The vulnerability part
(severity, EPSS, exploitation, automatable) depends only on the finding's advisory facts
and is cached by them: a CVE found in thousands of versions is evaluated once.

The score only orders within an SSVC decision and an SSVC level (`ssvc_level`): the queue
is decision, deployed, level, score. So the SSVC inputs dominate: a finding whose
exploitation, System Exposure, automatable and human impact are all at least another's,
one higher, ranks above it whatever the score says.

What trust means for a vulnerability: evidence about who can reach the code (an attested
identity, mTLS on the reaching hops, signed provenance), not about how bad the code is. It
counts both ways but never beats an SSVC input: with equal SSVC inputs, lower trust on the
reaching path ranks higher (the `low_trust` factor), as does higher EPSS; an attested,
mTLS-reached service with a higher human impact still ranks above an unattested one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from trustrank.risk.inputs import (
    DECISIONS,
    EXPOSURES,
    HUMAN_IMPACTS,
    Confidence,
    Decision,
    Exploitation,
    Exposure,
    Finding,
    HumanImpact,
    RankSettings,
)


@dataclass(frozen=True, slots=True)
class Factor:
    """One line of an explanation. `effect` is the signed number of score points the
    factor added (0 for factors that decide the SSVC decision but not the score)."""

    name: str
    value: str | float | bool | None
    effect: float
    source: str
    confidence: Confidence


SEVERITY_LABELS = {
    "critical": 0.95,
    "high": 0.8,
    "medium": 0.55,
    "low": 0.25,
    "none": 0.0,
    "unknown": 0.5,
}
# An unknown exposure counts as `RankSettings.unknown_exposure` here too, as in the SSVC
# decision and level (`inputs.ssvc_exposure`).
EXPOSURE_VALUES: dict[Exposure, float] = {"small": 0.0, "controlled": 0.5, "open": 1.0}
REACHABILITY_VALUES = {"not observed": 0.0, "unknown": 0.5, "observed": 1.0,
                       "not applicable": 0.5}
IMPACT_VALUES: dict[HumanImpact, float] = {
    "low": 0.0, "medium": 1 / 3, "high": 2 / 3, "very high": 1.0,
}
EXPLOITATION_VALUES: dict[Exploitation, float] = {"none": 0.0, "public poc": 0.5, "active": 1.0}
EXPLOITATION_INDEX: dict[Exploitation, int] = {"none": 0, "public poc": 1, "active": 2}

# One queue: identity and reliability findings get an SSVC-like decision from their kind
# and the service's exposure (small, controlled, open). "*" is the fallback of a kind.
# Human impact then moves it one step: low one down, very high one up.
KIND_TABLE: dict[tuple[str, str], tuple[Decision, Decision, Decision]] = {
    ("identity", "expired"): ("scheduled", "scheduled", "out-of-cycle"),
    ("identity", "chain_invalid"): ("scheduled", "scheduled", "out-of-cycle"),
    ("identity", "anchor_expired"): ("scheduled", "scheduled", "out-of-cycle"),
    ("identity", "policy_violation"): ("scheduled", "scheduled", "out-of-cycle"),
    ("identity", "expiring"): ("defer", "scheduled", "scheduled"),
    ("identity", "anchor_expiring"): ("defer", "scheduled", "scheduled"),
    ("identity", "weak_key"): ("defer", "scheduled", "scheduled"),
    ("identity", "weak_signature"): ("defer", "scheduled", "scheduled"),
    ("identity", "unmapped"): ("defer", "defer", "scheduled"),
    ("identity", "*"): ("defer", "scheduled", "scheduled"),
    ("reliability", "broken_context"): ("defer", "defer", "scheduled"),
    ("reliability", "*"): ("defer", "defer", "scheduled"),
}
_IMPACT_STEP: dict[HumanImpact, int] = {"low": -1, "medium": 0, "high": 0, "very high": 1}


SSVC_LEVEL_MAX = 8


def ssvc_level(
    *, exploitation: Exploitation, exposure: Exposure, automatable: bool,
    human_impact: HumanImpact,
) -> int:
    """How many steps above its lowest value each of the four Deployer inputs stands,
    summed (0-8). The queue orders by it right after the decision, before the score: a
    finding whose SSVC inputs are all at least another's, one higher, has a higher level,
    so no score factor (trust, EPSS, severity, reachability) can put it below the other."""
    return (EXPLOITATION_INDEX[exploitation] + EXPOSURES.index(exposure) + int(automatable)
            + HUMAN_IMPACTS.index(human_impact))


def kind_decision(
    *, kind: str, sub_kind: str, exposure: Exposure, human_impact: HumanImpact
) -> Decision:
    row = KIND_TABLE.get((kind, sub_kind)) or KIND_TABLE.get((kind, "*"))
    if row is None:
        row = KIND_TABLE[("identity", "*")]
    base = DECISIONS.index(row[("small", "controlled", "open").index(exposure)])
    return DECISIONS[max(0, min(3, base + _IMPACT_STEP[human_impact]))]


@lru_cache(maxsize=16384)
def parse_vector(vector: str) -> tuple[str, dict[str, str]]:
    """(`"3"`, `"4"`, `"2"` or `""`, metrics) from a CVSS vector. Tolerates case, spaces,
    a missing `CVSS:x` prefix and v2's parentheses; unknown text gives ("", {})."""
    text = vector.strip().strip("()").upper().replace(" ", "")
    metrics: dict[str, str] = {}
    version = ""
    for part in text.split("/"):
        key, sep, value = part.partition(":")
        if not sep:
            continue
        if key == "CVSS":
            version = value.split(".", 1)[0]
        else:
            metrics.setdefault(key, value)
    if not version and metrics:
        if "AT" in metrics:
            version = "4"
        elif "PR" in metrics and "UI" in metrics:
            version = "3"
        elif "AU" in metrics:
            version = "2"
    return version, metrics


def is_automatable(vector: str) -> bool | None:
    """SSVC Automatable from a CVSS vector: v3 `AV:N/AC:L/PR:N/UI:N`, v4 additionally
    `AT:N`. None when the vector is missing or not v3/v4 (the decision then uses "no")."""
    version, m = parse_vector(vector)
    if version == "3":
        needed = {"AV": "N", "AC": "L", "PR": "N", "UI": "N"}
    elif version == "4":
        needed = {"AV": "N", "AC": "L", "AT": "N", "PR": "N", "UI": "N"}
    else:
        return None
    if any(k not in m for k in needed):
        return None
    return all(m[k] == v for k, v in needed.items())


def exploitation_of(*, in_kev: bool, epss: float | None, threshold: float) -> Exploitation:
    if in_kev:
        return "active"
    if epss is not None and epss >= threshold:
        return "public poc"
    return "none"


@dataclass(frozen=True, slots=True)
class VulnFacts:
    """The finding-only part of a vulnerability's score, shared by every finding with the
    same advisory facts."""

    exploitation: Exploitation
    automatable: bool
    points: float
    factors: tuple[Factor, ...]
    # Index into `DeploymentContext.decisions`: 2 · exploitation index + automatable.
    slot: int


def _pts(weight: float, value: float) -> float:
    return round(weight * (value - 0.5), 4)


def vuln_facts(f: Finding, settings: RankSettings) -> VulnFacts:
    w = settings.weights
    exploitation = exploitation_of(
        in_kev=f.in_kev, epss=f.epss, threshold=settings.epss_poc_threshold
    )
    auto = is_automatable(f.cvss_vector)
    if f.cvss_score is not None:
        sev_value = max(0.0, min(1.0, f.cvss_score / 10.0))
        sev_source = f"CVSS {f.cvss_score:g}" + (f" ({f.cvss_vector})" if f.cvss_vector else "")
        if f.severity_source == "nvd":
            sev_source += " severity from NVD"
        sev_conf: Confidence = "high"
    else:
        sev_value = SEVERITY_LABELS.get(f.severity.lower(), 0.5)
        sev_source = f"severity label {f.severity}"
        sev_conf = "medium"
    # EPSS probabilities crowd near zero; the square root spreads them so that 0.01 and 0.2
    # differ visibly while keeping the order.
    epss_value = math.sqrt(max(0.0, min(1.0, f.epss))) if f.epss is not None else 0.5
    epss_source = (
        f"EPSS {f.epss:g}"
        + (f" (percentile {f.epss_percentile:g})" if f.epss_percentile is not None else "")
        + (f" on {f.epss_date.isoformat()}" if f.epss_date else "")
        if f.epss is not None
        else "no EPSS score"
    )
    if exploitation == "active":
        expl_source = f"CISA KEV entry {f.vuln_id}" + (
            f" added {f.kev_date.isoformat()}" if f.kev_date else ""
        )
        expl_conf: Confidence = "high"
    elif exploitation == "public poc":
        expl_source = f"{epss_source} ≥ {settings.epss_poc_threshold:g}"
        expl_conf = "medium"
    else:
        expl_source = f"not in CISA KEV; {epss_source}"
        expl_conf = "medium" if f.epss is not None else "low"
    auto_value = 0.5 if auto is None else float(auto)
    factors = (
        Factor("severity", f.cvss_score if f.cvss_score is not None else f.severity,
               _pts(w.severity, sev_value), sev_source, sev_conf),
        Factor("exploitation", exploitation, _pts(w.exploitation, EXPLOITATION_VALUES[
            exploitation]), expl_source, expl_conf),
        Factor("epss", f.epss, _pts(w.epss, epss_value), epss_source,
               "high" if f.epss is not None else "low"),
        Factor("automatable", "unknown" if auto is None else ("yes" if auto else "no"),
               _pts(w.automatable, auto_value),
               f"CVSS vector {f.cvss_vector}" if f.cvss_vector else "no CVSS vector",
               "low" if auto is None else "high"),
    )
    return VulnFacts(
        exploitation=exploitation,
        automatable=bool(auto),
        points=round(sum(x.effect for x in factors), 4),
        factors=factors,
        slot=2 * EXPLOITATION_INDEX[exploitation] + bool(auto),
    )


def kind_facts(f: Finding, settings: RankSettings) -> VulnFacts:
    """Identity and reliability findings: severity counts; exploitation, EPSS and
    automatable do not apply and stay neutral."""
    w = settings.weights
    sev_value = SEVERITY_LABELS.get(f.severity.lower(), 0.5)
    factors = (
        Factor("kind", f"{f.kind}/{f.sub_kind or '*'}", 0.0,
               f"one-queue table; evidence {f.subject}" if f.subject else "one-queue table",
               "high"),
        Factor("severity", f.severity, _pts(w.severity, sev_value),
               f"severity label {f.severity}", "medium"),
    )
    return VulnFacts(exploitation="none", automatable=False,
                     points=round(sum(x.effect for x in factors), 4), factors=factors, slot=0)
