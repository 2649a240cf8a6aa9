"""Identity rules as pure functions: chain verification, strength, service mapping, call-edge
strength, caller policy and the findings they imply. No Django, no ORM: the services feed
plain data in and store what comes out; the graph engine calls `edge_identity_strength`.

Identity strength (0-100) of one certificate, with the default `StrengthRules`:

====================================================================  =====
chain to the environment's trust bundle is valid, SPIFFE ID in a
trust domain the bundle is known to serve                               100
valid chain, no SPIFFE ID                                                70
valid chain, SPIFFE ID in a trust domain no bundle names                 30
self-signed, or issuer unknown (not in the bundle; or no bundle yet)     30
expired, not yet valid, or invalid chain (bad signature, CA flag,
path length, forbidden algorithm, SVID rules)                             0
====================================================================  =====

Then weaknesses lower it: an RSA or DSA key under 2048 bits or an EC key under 256 bits
subtracts `weak_key_penalty` (40); a SHA-1 or MD5 signature subtracts
`weak_signature_penalty` (40). The result is clamped to 0-100. Every value is a setting
(`TRUSTRANK_IDENTITY_STRENGTH`), see docs/identity.md.

A certificate that claims a SPIFFE ID but does not chain to the bundle is rated on its own
evidence (30 or 0) and is never counted for the identity it claims: an identity's strength
is the best strength among its certificates whose chain is valid now.

The package, by concern: `chain` (verification), `strength` (of a certificate and of an
identity), `edges` (SPIFFE IDs to services, call edges, caller policy), `expiry` (when a
coming expiry deserves a finding) and `findings` (what the facts imply). Every public name
is importable from the package itself.
"""

from trustrank.identity.engine.chain import (
    ChainStatus,
    PathEntry,
    VerificationResult,
    chain_verify,
)
from trustrank.identity.engine.edges import (
    DEFAULT_MAPPING_EXCLUDE,
    DEFAULT_MAPPING_RULES,
    CallerPolicy,
    EdgeRules,
    EdgeStrength,
    EndpointEvidence,
    MappingRules,
    ObservedEdge,
    ServiceRef,
    caller_allowed,
    edge_identity_strength,
    edge_policy_violations,
    identity_map,
)
from trustrank.identity.engine.expiry import (
    ExpiryRules,
    expiry_warning,
    rotation_observed,
    superseded_by,
    time_left,
)
from trustrank.identity.engine.findings import (
    AnchorFacts,
    CertificateFacts,
    FindingSpec,
    anchor_findings,
    certificate_findings,
    policy_finding,
    unmapped_identity_finding,
)
from trustrank.identity.engine.strength import (
    IdentityCertificate,
    Strength,
    StrengthRules,
    Weakness,
    certificate_strength,
    certificate_weaknesses,
    identity_strength_reason,
    trust_bundle_warnings,
)

__all__ = [
    "DEFAULT_MAPPING_EXCLUDE",
    "DEFAULT_MAPPING_RULES",
    "AnchorFacts",
    "CallerPolicy",
    "CertificateFacts",
    "ChainStatus",
    "EdgeRules",
    "EdgeStrength",
    "EndpointEvidence",
    "ExpiryRules",
    "FindingSpec",
    "IdentityCertificate",
    "MappingRules",
    "ObservedEdge",
    "PathEntry",
    "ServiceRef",
    "Strength",
    "StrengthRules",
    "VerificationResult",
    "Weakness",
    "anchor_findings",
    "caller_allowed",
    "certificate_findings",
    "certificate_strength",
    "certificate_weaknesses",
    "chain_verify",
    "edge_identity_strength",
    "edge_policy_violations",
    "expiry_warning",
    "identity_map",
    "identity_strength_reason",
    "policy_finding",
    "rotation_observed",
    "superseded_by",
    "time_left",
    "trust_bundle_warnings",
    "unmapped_identity_finding",
]
