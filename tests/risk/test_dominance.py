"""Trust both ways, and the dominance guarantee (risk-2).

Trust is evidence about who can reach the code, not about how bad the code is: it orders
findings whose SSVC inputs are equal, and never overturns a strictly higher one. If A's
Deployer inputs (exploitation, System Exposure, automatable, human impact) are all at least
B's and one is higher, A ranks above B whatever their trust, EPSS, severity or
reachability; with equal SSVC inputs, higher EPSS and lower trust rank higher. The Deployer
decision every combination gets is the CERT/CC table's (the corpus copy), an unknown
exposure reading as open."""

from __future__ import annotations

import csv
from itertools import product
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from trustrank.risk import (
    CallEdge,
    Deployment,
    Finding,
    ObservedComponent,
    RankInputs,
    RootSpanOrigin,
    Service,
    ServiceLibraries,
    rank,
)
from trustrank.risk.inputs import DECISIONS, EXPLOITATIONS, EXPOSURES, HUMAN_IMPACTS

AUTOMATABLE = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"
NOT_AUTOMATABLE = "CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"
CORPUS = Path("/work/shared/corpus/ssvc/deployer_patch_application_priority_1_0_0.csv")
SHIPPED = ROOT / "trustrank" / "risk" / "data" / CORPUS.name
EXPOSURE_AXIS = ("small", "controlled", "open")  # "unknown" is drawn apart: it reads as open

# One drawn finding: (exploitation, exposure, automatable, human impact, EPSS, identity
# strength or None, component seen running). Every finding has its own service and project
# version, so nothing but its own axes differs; severity is the same for all. Reachability
# is "observed" or "not observed" on a traced service (the last flag), "unknown" on an
# untraced one.
Axes = tuple[str, str, bool, str, float, float | None, bool]
REACH = {"not observed": 0, "unknown": 1, "observed": 2}


def _epss(exploitation: str, u: float) -> float:
    """An EPSS probability consistent with the exploitation level (`public poc` from 0.1
    under the default threshold; `active` comes from KEV whatever the EPSS)."""
    return round(u * 0.0999, 4) if exploitation == "none" else round(0.1 + u * 0.9, 4)


def _inputs(rows: list[Axes]) -> RankInputs:
    services, origins, libraries, deployments, findings = [], [], [], [], []
    for i, (expl, exposure, auto, impact, epss, strength, seen) in enumerate(rows):
        name, version = f"s{i:03d}", f"v{i:03d}"
        if exposure != "unknown":
            # Traced, and reached the way its exposure says (loopback callers only: small).
            services.append(Service(environment="prod", name=name, identity_strength=strength,
                                    identity=f"spiffe://prod/{name}" if strength else ""))
            origins.append(RootSpanOrigin(environment="prod", service=name, spans=10,
                                          address_class={"small": "local",
                                                         "controlled": "internal",
                                                         "open": "internet"}[exposure]))
            libraries.append(ServiceLibraries(
                environment="prod", service=name, traced=True,
                observed=(ObservedComponent(component_key="pkg:npm/left-pad",
                                            calls_per_minute=5, evidence="test"),)
                if seen else ()))
        elif strength is not None:
            # Declared, sends no traces, but holds an attested identity.
            services.append(Service(environment="prod", name=name, identity_strength=strength,
                                    identity=f"spiffe://prod/{name}"))
        deployments.append(Deployment(environment="prod", service=name, project_version=version,
                                      human_impact=impact))
        findings.append(Finding(
            id=f"f{i:03d}", vuln_id="CVE-2099-0001", severity="high", cvss_score=8.0,
            cvss_vector=AUTOMATABLE if auto else NOT_AUTOMATABLE, in_kev=expl == "active",
            epss=epss, project_version=version, component_key="pkg:npm/left-pad",
            baseline=50.0,
        ))
    return RankInputs(services=tuple(services), origins=tuple(origins),
                      libraries=tuple(libraries), deployments=tuple(deployments),
                      findings=tuple(findings))


def _ssvc(row: Axes) -> tuple[int, int, int, int]:
    expl, exposure, auto, impact = row[:4]
    return (EXPLOITATIONS.index(expl), EXPOSURES.index("open" if exposure == "unknown"
                                                      else exposure),
            int(auto), HUMAN_IMPACTS.index(impact))


def _trust_risk(row: Axes) -> float:
    return 1.0 - (row[5] or 0.0) / 100.0


def _reach(row: Axes) -> int:
    if row[1] == "unknown":
        return REACH["unknown"]
    return REACH["observed" if row[6] else "not observed"]


def _geq(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True))


# --- (a) the case that was upside down ---------------------------------------------------


def _attested_and_unattested() -> RankInputs:
    """One flaw in two versions behind one gateway: `vault` is attested and reached over
    mTLS (human impact high); `legacy` has no identity and plain calls (impact medium)."""
    return RankInputs(
        services=(
            Service(environment="prod", name="gateway", ingress_override=True,
                    identity_strength=100, identity="spiffe://prod/gateway"),
            Service(environment="prod", name="vault", identity_strength=100,
                    identity="spiffe://prod/vault"),
            Service(environment="prod", name="legacy"),
        ),
        edges=(
            CallEdge(environment="prod", caller="gateway", callee="vault", calls_per_minute=60,
                     mtls_share=1.0, sig=100),
            CallEdge(environment="prod", caller="gateway", callee="legacy",
                     calls_per_minute=60),
        ),
        libraries=tuple(ServiceLibraries(environment="prod", service=s, traced=True)
                        for s in ("gateway", "vault", "legacy")),
        deployments=(
            Deployment(environment="prod", service="vault", project_version="vault@1",
                       human_impact="high"),
            Deployment(environment="prod", service="legacy", project_version="legacy@1",
                       human_impact="medium"),
        ),
        findings=tuple(
            Finding(id=f"f-{v}", vuln_id="CVE-2099-0002", severity="high", cvss_score=7.5,
                    cvss_vector=NOT_AUTOMATABLE, epss=0.01, project_version=f"{v}@1",
                    component_key="pkg:npm/left-pad", baseline=60.0)
            for v in ("vault", "legacy")
        ),
    )


def test_an_attested_mtls_copy_with_higher_human_impact_ranks_above_an_unattested_one():
    result = rank(inputs=_attested_and_unattested(), with_digest=False)
    vault, legacy = (next(r for r in result.findings if r.service == s)
                     for s in ("vault", "legacy"))
    # Both reached from the internet through the gateway; same decision (none/open/no →
    # scheduled for medium and high alike) ...
    assert vault.decision == legacy.decision == "scheduled"
    assert (vault.exposure, legacy.exposure) == ("open", "open")
    # ... and the unattested copy scores more (low trust adds points) ...
    assert vault.trust > legacy.trust and legacy.score > vault.score
    # ... but human impact is an SSVC input and trust is not: the attested copy is first.
    assert vault.rank == 1 and legacy.rank == 2


def test_with_equal_ssvc_inputs_lower_trust_and_higher_epss_rank_higher():
    rows: list[Axes] = [
        ("none", "controlled", False, "medium", 0.01, 100.0, False),  # attested
        ("none", "controlled", False, "medium", 0.01, None, False),  # no identity: up
        ("none", "controlled", False, "medium", 0.05, 100.0, False),  # higher EPSS: up
    ]
    by_id = {r.finding_id: r for r in rank(inputs=_inputs(rows), with_digest=False).findings}
    assert by_id["f001"].rank < by_id["f000"].rank
    assert by_id["f002"].rank < by_id["f000"].rank


# --- (b) dominance as a property ---------------------------------------------------------

_axes = st.tuples(
    st.sampled_from(EXPLOITATIONS),
    st.sampled_from((*EXPOSURE_AXIS, "unknown")),
    st.booleans(),
    st.sampled_from(HUMAN_IMPACTS),
    st.floats(min_value=0.0, max_value=1.0),
    st.one_of(st.none(), st.floats(min_value=0.0, max_value=100.0)),
    st.booleans(),
).map(lambda t: (t[0], t[1], t[2], t[3], _epss(t[0], t[4]),
                 None if t[5] is None else round(t[5], 1), t[6] and t[1] != "unknown"))


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_axes, min_size=2, max_size=12))
def test_dominance_holds_in_the_computed_order(rows):
    result = rank(inputs=_inputs(rows), with_digest=False)
    by_id = {r.finding_id: r for r in result.findings}
    for (i, a), (j, b) in product(enumerate(rows), repeat=2):
        if i == j:
            continue
        ra, rb = by_id[f"f{i:03d}"], by_id[f"f{j:03d}"]
        sa, sb = _ssvc(a), _ssvc(b)
        # Strictly higher SSVC inputs: above, whatever EPSS and trust say.
        if _geq(sa, sb) and sa != sb:
            assert ra.rank < rb.rank, (a, b, ra, rb)
        # At least as high on every axis (SSVC inputs, EPSS, trust risk, reachability),
        # higher on one: at or above (a tie on every key may fall to the finding id).
        va = (*sa, a[4], _trust_risk(a), _reach(a))
        vb = (*sb, b[4], _trust_risk(b), _reach(b))
        if _geq(va, vb) and va != vb:
            assert (DECISIONS.index(ra.decision), ra.score) >= (
                DECISIONS.index(rb.decision), rb.score) or ra.rank < rb.rank, (a, b, ra, rb)
            assert ra.rank < rb.rank or (ra.decision, ra.score) == (rb.decision, rb.score)


# --- (c) the Deployer table ----------------------------------------------------------------


def _corpus_rows() -> list[dict[str, str]]:
    path = CORPUS if CORPUS.exists() else SHIPPED
    return list(csv.DictReader(path.read_text("utf-8").splitlines()))


def _columns(row: dict[str, str]) -> tuple[str, str, bool, str, str]:
    values = list(row.values())
    return values[1], values[2], values[3] == "yes", values[4], values[5]


def test_every_deployer_row_is_the_decision_a_ranked_finding_gets():
    table = [_columns(r) for r in _corpus_rows()]
    assert len(table) == 72
    rows: list[Axes] = [(e, x, a, h, _epss(e, 0.5), None, False)
                        for e, x, a, h, _d in table]
    # Unknown exposure decides as the corpus row for open.
    rows += [(e, "unknown", a, h, _epss(e, 0.5), None, False)
             for e, x, a, h, _d in table if x == "open"]
    expected = [d for *_, d in table] + [d for e, x, a, h, d in table if x == "open"]
    by_id = {r.finding_id: r for r in rank(inputs=_inputs(rows), with_digest=False).findings}
    got = [by_id[f"f{i:03d}"].decision for i in range(len(rows))]
    assert got == expected
    assert {by_id[f"f{i:03d}"].exposure for i in range(72, len(rows))} == {"unknown"}


def test_the_deployer_table_never_lowers_a_decision_when_an_input_rises():
    """What the dominance guarantee rests on: the CERT/CC table is monotone in each input,
    so a dominating finding's decision is never lower (the SSVC level then orders)."""
    table = {(EXPLOITATIONS.index(e), EXPOSURES.index(x), int(a), HUMAN_IMPACTS.index(h)):
             DECISIONS.index(d) for e, x, a, h, d in map(_columns, _corpus_rows())}
    for ka, kb in product(table, repeat=2):
        if _geq(ka, kb):
            assert table[ka] >= table[kb], (ka, kb)


def test_the_reading_of_an_unknown_exposure_is_a_versioned_setting():
    from trustrank.risk import RankSettings

    # none/open/yes/very high is out-of-cycle; none/controlled/yes/very high scheduled.
    rows: list[Axes] = [("none", "unknown", True, "very high", 0.01, None, False)]
    [default] = rank(inputs=_inputs(rows), with_digest=False).findings
    assert (default.exposure, default.decision) == ("unknown", "out-of-cycle")
    assert RankSettings().version == "risk-3" and RankSettings().unknown_exposure == "open"
    controlled = RankSettings(version="local-1", unknown_exposure="controlled")
    [r] = rank(inputs=_inputs(rows), settings=controlled, with_digest=False).findings
    assert (r.exposure, r.decision) == ("unknown", "scheduled")
    exposure = next(f for f in r.explanation if f.name == "exposure")
    assert "read as System Exposure 'controlled'" in exposure.source
    assert exposure.confidence == "low" and exposure.effect == 0.0
