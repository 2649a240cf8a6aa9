"""What the ranking engine consumes: plain, frozen, hashable records.

The wiring layer (the ranking app) reads the database and builds one `RankInputs`; the
engine never sees a model instance. Every record names its neighbours by natural keys
(environment + service name, project version key, component key), not by database ids, so
the same inputs always produce the same output whatever order they arrive in.

Keys:
- a service is `(environment, name)`;
- a project version is an opaque string chosen by the wiring (e.g. `"shop@1.4.2"` or a
  primary key as text), the same in `Deployment`, `ProjectVersion`, `Component`, `Finding`;
- a component key is a package URL without version, qualifiers or subpath
  (`pkg:maven/org.apache.logging.log4j/log4j-core`), or a bare name when the SBOM had no
  purl. Library evidence may name a whole group (`pkg:maven/org.apache.logging.log4j`),
  which matches every component below it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from itertools import repeat
from typing import Any, Literal

AddressClass = Literal["local", "internal", "internet"]
Exposure = Literal["small", "controlled", "open"]
# What a context or result shows: an SSVC System Exposure, or "unknown" for a service that
# is declared (a deployment names it) but sends no traces. The SSVC decision then uses
# `RankSettings.unknown_exposure` (see `ssvc_exposure`).
ExposureValue = Literal["small", "controlled", "open", "unknown"]
Exploitation = Literal["none", "public poc", "active"]
HumanImpact = Literal["low", "medium", "high", "very high"]
Decision = Literal["defer", "scheduled", "out-of-cycle", "immediate"]
Reachability = Literal["not observed", "unknown", "observed", "not applicable"]
FindingKind = Literal["vulnerability", "identity", "reliability"]
Confidence = Literal["high", "medium", "low"]

# Ordered from least to most urgent: the index is the order used everywhere.
EXPOSURES: tuple[Exposure, ...] = ("small", "controlled", "open")
EXPLOITATIONS: tuple[Exploitation, ...] = ("none", "public poc", "active")
HUMAN_IMPACTS: tuple[HumanImpact, ...] = ("low", "medium", "high", "very high")
DECISIONS: tuple[Decision, ...] = ("defer", "scheduled", "out-of-cycle", "immediate")
UNKNOWN_EXPOSURE: ExposureValue = "unknown"


@dataclass(frozen=True, slots=True)
class Service:
    """A service seen in traces or declared by an operator.

    `ingress_candidate`: something outside traces says the internet can reach it (a
    Kubernetes Service of type LoadBalancer, an Ingress backend). `ingress_override`: the
    operator's word, which wins over every observation: True makes it an entry point, False
    makes it not one even when root spans came from public addresses.
    `identity_strength`: 0-100 for an attested identity (a valid mTLS certificate with a
    SPIFFE ID from a configured trust bundle), None when it has none; it makes the service a
    trust anchor. `identity` names that identity for explanations (the SPIFFE ID or the
    certificate fingerprint). `ingress_detail` says, for people, where the candidate or the
    override came from (`Kubernetes Service shop/frontend type LoadBalancer (cluster c1)`,
    `operator marked ingress via API by alice at 2026-12-04 14:00 UTC`); the exposure
    explanation names it as the first hop of the path from the internet."""

    environment: str
    name: str
    namespace: str = ""
    ingress_candidate: bool = False
    ingress_override: bool | None = None
    ingress_detail: str = ""
    identity_strength: float | None = None
    identity: str = ""


@dataclass(frozen=True, slots=True)
class CallEdge:
    """Observed calls from `caller` to `callee` in one environment over the ranking window.

    The caller is a service name or an `ExternalPeer` name (a webhook sender). `sig` is the
    identity strength of the hop, 0-100 (how well the callee knows who called: 100 for
    verified mTLS with an attested SPIFFE ID, lower for plain TLS or no identity).
    `calls_per_minute` is the average over the ranking window; where the wiring has
    per-minute buckets it also gives the last hour's rate and the busiest minute's
    (`recent_calls_per_minute`, `peak_calls_per_minute`), for explanations only."""

    environment: str
    caller: str
    callee: str
    calls_per_minute: float = 0.0
    error_rate: float = 0.0
    mtls_share: float = 0.0
    sig: float = 0.0
    recent_calls_per_minute: float | None = None
    peak_calls_per_minute: float | None = None


@dataclass(frozen=True, slots=True)
class ExternalPeer:
    """A peer outside the traced services: a SaaS API, an untraced database, a webhook
    sender. Its address class decides whether calls *from* it count as internet ingress."""

    environment: str
    name: str
    address_class: AddressClass = "internet"


@dataclass(frozen=True, slots=True)
class RootSpanOrigin:
    """Root server spans of a service grouped by the class of their caller's address
    (`client.address`, else `network.peer.address`; absent counts as internet). Build it with
    `trustrank.risk.addresses.classify_address`. `example_address` is kept for the
    explanation only."""

    environment: str
    service: str
    address_class: AddressClass
    spans: int = 1
    example_address: str = ""


@dataclass(frozen=True, slots=True)
class Deployment:
    """A service runs a project version. `source` says how TrustRank knows (an SBOM upload
    with `service=`, an operator, the service's `service.name`/`service.version`), in
    words (`sbom upload`, `API`, `telemetry`, `page`). `project_version` is the key the
    other records use; `project_version_name` names it for people (`shop@1.4.2`)."""

    environment: str
    service: str
    project_version: str
    human_impact: HumanImpact = "medium"
    source: str = ""
    project_version_name: str = ""


@dataclass(frozen=True, slots=True)
class ProjectVersion:
    """SBOM-level provenance of a project version."""

    key: str
    sbom_signed: bool = False


@dataclass(frozen=True, slots=True)
class Component:
    """A component of a project version with its code-provenance facts."""

    project_version: str
    key: str
    hashes_present: bool = False
    supplier_known: bool = False
    # Code packages the SBOM says the component holds (library evidence maps through them).
    packages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObservedComponent:
    """Library evidence that names a component (see `trustrank.risk.libraries`): the
    component key (or group key), how often per minute on average over the window, and
    the evidence that named it (`scope io.opentelemetry.log4j-context-data-2.17`,
    `code.namespace org.apache...`, `exception frame org.apache...Logger.log`). With
    per-minute buckets, the last hour's rate and the busiest minute's as well (explanations
    only)."""

    component_key: str
    calls_per_minute: float
    evidence: str
    recent_calls_per_minute: float | None = None
    peak_calls_per_minute: float | None = None


@dataclass(frozen=True, slots=True)
class ServiceLibraries:
    """What a service's telemetry says about the code it runs. `traced` is False when the
    service sent no spans in the window: reachability is then unknown, not "not observed"."""

    environment: str
    service: str
    traced: bool
    observed: tuple[ObservedComponent, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """One open finding to rank.

    Vulnerabilities name `project_version` and `component_key` (and may pin one deployment
    with `environment` + `service`); identity and reliability findings name `environment` +
    `service` and a `sub_kind` (`expired`, `broken_context`, …; see `scoring.KIND_TABLE`).
    `severity` is the label (critical/high/medium/low/none/unknown); `cvss_score` and
    `cvss_vector` (CVSS v3.x or v4.0 string) come from the advisory, else from NVD
    (`severity_source` "nvd"). `baseline` is the static
    0-100 score the findings list shows without context. `subject` names the evidence of a
    non-vulnerability finding (a certificate fingerprint, a call edge)."""

    id: str
    kind: FindingKind = "vulnerability"
    sub_kind: str = ""
    vuln_id: str = ""
    severity: str = "unknown"
    cvss_score: float | None = None
    cvss_vector: str = ""
    in_kev: bool = False
    kev_date: date | None = None
    epss: float | None = None
    epss_percentile: float | None = None
    epss_date: date | None = None
    project_version: str = ""
    component_key: str = ""
    environment: str = ""
    service: str = ""
    baseline: float = 0.0
    subject: str = ""
    # Where severity and CVSS come from: "advisory", "sbom", "nvd" (the advisory has no
    # CVSS; NVD's score of its CVE), "label" or "" (unknown).
    severity_source: str = ""


def findings_from_columns(n: int, columns: Mapping[str, Iterable[Any]]) -> list[Finding]:
    """`n` findings from one iterable of values per field (every field of `Finding`, by
    name): the same records as `Finding(**row)` per row. Each field is set by its slot
    descriptor in one pass in C over all records: a frozen dataclass's `__init__` sets its
    18 fields one `object.__setattr__` call at a time, several seconds per million records.
    The descriptors are what that `__init__` goes through too, so no frozen record is
    changed after it is made."""
    if columns.keys() != set(Finding.__slots__):
        raise ValueError("findings_from_columns needs every field of Finding")
    records = list(map(object.__new__, repeat(Finding, n)))
    for name in Finding.__slots__:
        deque(map(getattr(Finding, name).__set__, records, columns[name]), maxlen=0)
    return records


@dataclass(frozen=True, slots=True)
class RankInputs:
    """Everything one ranking run reads. Order inside the tuples does not matter; finding
    ids must be unique."""

    services: tuple[Service, ...] = ()
    edges: tuple[CallEdge, ...] = ()
    peers: tuple[ExternalPeer, ...] = ()
    origins: tuple[RootSpanOrigin, ...] = ()
    deployments: tuple[Deployment, ...] = ()
    project_versions: tuple[ProjectVersion, ...] = ()
    components: tuple[Component, ...] = ()
    libraries: tuple[ServiceLibraries, ...] = ()
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Points each factor can move a score away from the neutral 50 (half up, half down).

    A factor's value v in [0, 1] contributes `weight * (v - 0.5)`; unknown or not
    applicable sits at 0.5 and contributes nothing. The weights sum to 100 so the score
    stays in 0-100."""

    severity: float = 25.0
    reachability: float = 25.0
    epss: float = 15.0
    exposure: float = 15.0
    exploitation: float = 5.0
    automatable: float = 5.0
    human_impact: float = 5.0
    low_trust: float = 5.0


@dataclass(frozen=True, slots=True)
class RankSettings:
    """The engine's knobs. `version` is stored with every run: change it whenever a default
    or the order changes, so an old rank can be reproduced with the weights it was made
    with and an incremental run never merges into a queue ordered otherwise (it ranks in
    full when the previous run's version differs). risk-3: findings equal up to the id are
    ordered by the id as a number for database ids (shorter ids first, `queue_key.id_key`),
    where risk-2 used string order ("10" before "9"); nothing else changed.

    - `decay`: the 0.95 of formula 1.
    - `trust_floor`: trust below it is treated as none (stops the best-path search early).
    - `identity_trust_weight` / `code_trust_weight`: the fusion of runtime identity trust
      and code-provenance trust (they sum to 1).
    - `provenance_weights`: (SBOM signed, hashes present, supplier known), summing to 1.
    - `epss_poc_threshold`: EPSS probability from which exploitation counts as "public
      poc". EPSS is the modelled probability of exploitation activity in the next 30 days
      and FIRST publishes no cut-off; 0.1 (one in ten) keeps "public poc" for the small
      share of CVEs with a real signal. KEV membership is "active" whatever the EPSS.
    - `undeployed_exposure` / `default_human_impact`: for versions no service runs.
    - `unknown_exposure`: the System Exposure the SSVC decision (and the SSVC level that
      orders within a decision) uses for a service whose exposure is unknown: declared by a
      deployment but sending no traces, so nothing rules any exposure out. SSVC's guidance
      for partial information is to keep every value still possible (`E:SCO`), and its
      System Exposure heuristics choose small or controlled only "if open has been ruled
      out"; so the most urgent value, open, counts until evidence says otherwise. An
      unknown exposure never counts as small.
    - `library_map`: extra or replacing rules for `libraries.map_evidence` (see there).
    - `window_minutes`: the telemetry window the wiring averaged call rates over; the
      explanations name it ("peak 10.1/s over 24 h").
    """

    version: str = "risk-3"
    decay: float = 0.95
    trust_floor: float = 1e-6
    identity_trust_weight: float = 0.6
    code_trust_weight: float = 0.4
    provenance_weights: tuple[float, float, float] = (0.4, 0.3, 0.3)
    epss_poc_threshold: float = 0.1
    undeployed_exposure: Exposure = "small"
    unknown_exposure: Exposure = "open"
    default_human_impact: HumanImpact = "medium"
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    library_map: tuple[tuple[str, str, str], ...] = ()
    window_minutes: float = 1440.0


def ssvc_exposure(exposure: ExposureValue, settings: RankSettings) -> Exposure:
    """The System Exposure an SSVC table reads for a shown exposure ("unknown" → the
    settings' `unknown_exposure`)."""
    return settings.unknown_exposure if exposure == "unknown" else exposure
