"""The shape of `Finding.evidence`, per kind and category.

Evidence is what a person reads to understand a finding; nothing filters or sorts on it
(what does is a column on Finding). Each shape is a TypedDict so code that writes evidence is
checked by mypy; readers must tolerate missing keys (older rows, other versions).

vulnerability
    Evidence lives in columns (`match_reason`, `fixed_versions`, `vex_evidence`); `evidence`
    is empty.

identity (category = the certificate or identity problem)
    expired, expiring, weak_key, weak_signature, chain_invalid — CertificateEvidence;
    unmapped — UnmappedEvidence; policy_violation — PolicyViolationEvidence.
    The keys are those the identity engine reports (`trustrank/identity/engine/findings.py`), kept
    as they were in the former identity findings table.

reliability
    broken_context (design formula 10) — BrokenContextEvidence.
"""

from __future__ import annotations

from typing import Any, TypedDict


class CertificateEvidence(TypedDict, total=False):
    fingerprint_sha256: str
    subject: str
    spiffe_id: str | None
    not_after: str
    chain_status: str
    reason: str
    detail: str


class UnmappedEvidence(TypedDict, total=False):
    spiffe_id: str


class PolicyViolationEvidence(TypedDict, total=False):
    caller_service: str
    callee_service: str
    caller_spiffe_id: str | None
    mtls: bool
    reasons: list[str]


class BrokenContextEvidence(TypedDict, total=False):
    caller: str
    callee: str
    caller_namespace: str
    callee_namespace: str
    occurrences: int
    # Up to five examples: {"caller_trace_id": …} or {"trace_id": …, "span_id": …}.
    examples: list[dict[str, Any]]


BROKEN_CONTEXT = "broken_context"
