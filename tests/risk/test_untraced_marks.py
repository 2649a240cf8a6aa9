"""The engine's reading of how a declared service that sends no traces is reached: nothing
said, unknown; the operator's true or a Kubernetes route, open; the operator's false,
controlled (not an entry point, but internal callers cannot be ruled out with no traces).
A traced service with the same false and no callers stays small: its traces say so."""

from __future__ import annotations

from trustrank.risk import Deployment, RankInputs, Service, ServiceLibraries, rank
from trustrank.risk.results import ServiceResult

DENIED = "operator marked not an entry point via API by key ci"


def _services() -> dict[str, ServiceResult]:
    inputs = RankInputs(
        services=(
            Service(environment="prod", name="marked", ingress_override=True,
                    ingress_detail="operator marked ingress via API by key ci"),
            Service(environment="prod", name="routed", ingress_candidate=True,
                    ingress_detail="Kubernetes Service shop/lb type LoadBalancer"),
            Service(environment="prod", name="denied", ingress_override=False,
                    ingress_detail=DENIED),
            Service(environment="prod", name="traced-denied", ingress_override=False,
                    ingress_detail=DENIED),
        ),
        libraries=(ServiceLibraries(environment="prod", service="traced-denied",
                                    traced=True),),
        deployments=tuple(
            Deployment(environment="prod", service=name, project_version=f"v-{name}")
            for name in ("plain", "marked", "routed", "denied", "traced-denied")
        ),
    )
    return {s.name: s for s in rank(inputs=inputs).services}


def test_untraced_exposure_follows_the_mark_and_the_routes():
    services = _services()
    exposures = {name: s.exposure for name, s in services.items()}
    assert exposures == {"plain": "unknown", "marked": "open", "routed": "open",
                         "denied": "controlled", "traced-denied": "small"}
    assert services["marked"].hops[0].via == "operator override"
    assert services["routed"].hops[0].detail.startswith("Kubernetes Service shop/lb")
    assert services["denied"].exposure_reason == (
        f"{DENIED}; service declared in prod, sends no traces, so internal callers are "
        "possible")
