"""The values a finding's fields take (kinds, triage states, justifications, severities,
sources, actor kinds), the severity scores behind a label, and a finding's title line:
plain Python and Django choices, no tables."""

from __future__ import annotations

from django.db import models


class FindingKind(models.TextChoices):
    VULNERABILITY = "vulnerability", "Vulnerability"
    IDENTITY = "identity", "Identity"
    RELIABILITY = "reliability", "Reliability"


class TriageState(models.TextChoices):
    """CycloneDX VEX analysis states: one lifecycle for every kind."""

    IN_TRIAGE = "in_triage", "In triage"
    EXPLOITABLE = "exploitable", "Exploitable"
    RESOLVED = "resolved", "Resolved"
    RESOLVED_WITH_PEDIGREE = "resolved_with_pedigree", "Resolved with pedigree"
    FALSE_POSITIVE = "false_positive", "False positive"
    NOT_AFFECTED = "not_affected", "Not affected"


OPEN_STATES = (TriageState.IN_TRIAGE, TriageState.EXPLOITABLE)


class Justification(models.TextChoices):
    CODE_NOT_PRESENT = "code_not_present", "Code not present"
    CODE_NOT_REACHABLE = "code_not_reachable", "Code not reachable"
    REQUIRES_CONFIGURATION = "requires_configuration", "Requires configuration"
    REQUIRES_DEPENDENCY = "requires_dependency", "Requires dependency"
    REQUIRES_ENVIRONMENT = "requires_environment", "Requires environment"
    PROTECTED_BY_COMPILER = "protected_by_compiler", "Protected by compiler"
    PROTECTED_AT_RUNTIME = "protected_at_runtime", "Protected at runtime"
    PROTECTED_AT_PERIMETER = "protected_at_perimeter", "Protected at perimeter"
    PROTECTED_BY_MITIGATING_CONTROL = (
        "protected_by_mitigating_control",
        "Protected by mitigating control",
    )


# CycloneDX VEX analysis responses.
VEX_RESPONSES = ("can_not_fix", "will_not_fix", "update", "rollback", "workaround_available")


class Severity(models.TextChoices):
    CRITICAL = "critical", "Critical"
    HIGH = "high", "High"
    MEDIUM = "medium", "Medium"
    LOW = "low", "Low"
    NONE = "none", "None"
    UNKNOWN = "unknown", "Unknown"


class SeveritySource(models.TextChoices):
    """Where a vulnerability finding's severity and CVSS come from."""

    ADVISORY = "advisory", "the advisory's CVSS"
    SBOM = "sbom", "the SBOM's CVSS"
    NVD = "nvd", "NVD"
    LABEL = "label", "the advisory's severity label"
    NONE = "", "unknown"


class FindingSource(models.TextChoices):
    OSV = "osv", "OSV advisory match"
    SBOM = "sbom", "Reported in the SBOM (VDR/VEX)"
    CERTIFICATE = "certificate", "Certificate and identity evidence"
    POLICY = "policy", "Caller policy check"
    TRACES = "traces", "Trace evidence"
    CLUSTER = "cluster", "Cluster and GPU telemetry"


# Labels of the categories each kind reports (identity problems, reliability diagnoses).
CATEGORY_LABELS = {
    "expired": "Expired certificate",
    "expiring": "Certificate expiring soon",
    "weak_key": "Weak key",
    "weak_signature": "Weak signature",
    "chain_invalid": "Chain does not verify",
    "anchor_expired": "Trust anchor expired",
    "anchor_expiring": "Trust anchor expiring soon",
    "unmapped": "Identity not mapped to a service",
    "policy_violation": "Caller policy violation",
    "broken_context": "Lost trace context",
    # Cluster and GPU diagnoses (trustrank/risk/cluster/).
    "gpu_over_reserved": "GPU over-reserved",
    "gpu_training_evictable": "Evictable GPU training",
    "gpu_fragmentation": "GPU fragmentation",
    "gpu_fragmentation_blocks_pod": "Pod blocked by GPU fragmentation",
    "inference_latency": "Inference latency above threshold",
    "inference_throughput_unstable": "Unstable inference throughput",
    "inference_queue_imbalance": "Inference queue growing",
    "inference_kv_cache_pressure": "KV-cache pressure",
    "pod_preempted": "Pod preempted",
    "pod_evicted": "Pod evicted",
    "pod_oom_killed": "Pod OOM-killed",
    "pod_nomination_lost": "Preemption commitment lost",
    "priority_inversion": "Priority inversion",
    "io_throttling": "I/O throttling",
    "rdma_congestion": "RDMA congestion",
    "rdma_metadata_retries": "RDMA metadata retries",
}


class MatchStatus(models.TextChoices):
    AFFECTED = "affected", "Affected"
    UNKNOWN = "unknown", "Unknown (version not comparable)"
    REPORTED = "reported", "Reported by the SBOM"


# Stand-in scores (CVSS scale) when a finding has a severity label but no CVSS score: keeps
# the order of every kind sensible on one scale (unknown = 5.0).
LABEL_SCORES = {"critical": 9.5, "high": 8.0, "medium": 5.5, "low": 2.5, "none": 0.0}
UNKNOWN_SCORE = 5.0

# Baseline priority, 0-100: what static tools show, before contextual ranking.
# CVSS contributes up to 60, EPSS probability up to 25, KEV membership adds 15.
PRIORITY_CVSS_WEIGHT = 6.0
PRIORITY_EPSS_WEIGHT = 25.0
PRIORITY_KEV_BONUS = 15.0


def severity_score_for(label: str, cvss: float | None = None) -> float:
    if cvss is not None:
        return float(cvss)
    return LABEL_SCORES.get(label, UNKNOWN_SCORE)


# A title is one line: an advisory without a summary gives its details' first line, cut here.
TITLE_MAX_CHARS = 160


def title_line(text: str, *, limit: int = TITLE_MAX_CHARS) -> str:
    """The first non-blank line of `text`, whitespace collapsed, cut to `limit` with an
    ellipsis: what stands for a title when an advisory has none."""
    for line in (text or "").splitlines():
        words = " ".join(line.split())
        if words:
            return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"
    return ""


class ActorKind(models.TextChoices):
    USER = "user", "User"
    API_KEY = "api_key", "API key"
    SYSTEM = "system", "System job"
