"""Writes for identity evidence: loading parsed certificates and trust bundles (called by
ingest/loaders), verifying certificates, refreshing identities, syncing findings, mappings
and caller policies. One module per aggregate; the public names are re-exported here."""

from trustrank.identity.services.certificates import (
    certificates_import,
    certificates_store,
    certificates_verify,
    identity_environments_reevaluate,
    trust_bundle_replace,
)
from trustrank.identity.services.environments import (
    ENVIRONMENT_RE,
    InvalidEnvironment,
    environment_lock,
    environment_validate,
    expiry_window,
    mapping_rules,
    strength_rules,
)
from trustrank.identity.services.findings import (
    SEVERITY_LABELS,
    findings_sync,
    identity_finding_fingerprint,
)
from trustrank.identity.services.identities import identities_refresh, identity_map_set
from trustrank.identity.services.policies import (
    identity_policies_check,
    identity_policy_evaluate,
    service_policy_set,
    team_for_triage,
)

__all__ = [
    "ENVIRONMENT_RE",
    "SEVERITY_LABELS",
    "InvalidEnvironment",
    "certificates_import",
    "certificates_store",
    "certificates_verify",
    "environment_lock",
    "environment_validate",
    "expiry_window",
    "findings_sync",
    "identities_refresh",
    "identity_environments_reevaluate",
    "identity_finding_fingerprint",
    "identity_map_set",
    "identity_policies_check",
    "identity_policy_evaluate",
    "mapping_rules",
    "service_policy_set",
    "strength_rules",
    "team_for_triage",
    "trust_bundle_replace",
]
