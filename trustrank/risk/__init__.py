"""The pure engine: graph, trust decay, exposure, reachability, SSVC, scores, diagnoses.

No Django imports: everything here takes plain data and returns plain data. Start at
`rank` (see `trustrank.risk.engine`) with a `RankInputs` and a `RankSettings`; the
factors, weights and tables are described in docs/ranking.md."""

from trustrank.risk.engine import analyse, rank
from trustrank.risk.incremental import rank_incremental
from trustrank.risk.inputs import (
    CallEdge,
    Component,
    Deployment,
    ExternalPeer,
    Finding,
    ObservedComponent,
    ProjectVersion,
    RankInputs,
    RankSettings,
    RootSpanOrigin,
    ScoreWeights,
    Service,
    ServiceLibraries,
)
from trustrank.risk.results import (
    Movement,
    RankedFinding,
    RankResult,
    ServiceResult,
    canonical_json,
    diff_results,
    inputs_digest,
    result_digest,
)
from trustrank.risk.scoring import Factor

__all__ = [
    "CallEdge",
    "Component",
    "Deployment",
    "ExternalPeer",
    "Factor",
    "Finding",
    "Movement",
    "ObservedComponent",
    "ProjectVersion",
    "RankInputs",
    "RankResult",
    "RankSettings",
    "RankedFinding",
    "RootSpanOrigin",
    "ScoreWeights",
    "Service",
    "ServiceLibraries",
    "ServiceResult",
    "analyse",
    "canonical_json",
    "diff_results",
    "inputs_digest",
    "rank",
    "rank_incremental",
    "result_digest",
]
