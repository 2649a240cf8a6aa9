"""Whether the internet reaches a service, and what says so: the one computation behind the
ingress API (`ingress_apis`) and the services list (`service_rows`).

The operator's mark wins over the evidence both ways (`runtime.services.ingress`); the
evidence is root spans from public clients and the team's Kubernetes entry points. A list
reads the team's entry points once and passes them in (`entries`), so a page of services
costs no query per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trustrank.cluster.selectors import Entry, entry_points_read, routes_for
from trustrank.runtime.engine import INGRESS_CLIENT_ATTRIBUTE
from trustrank.runtime.models import Deployment, Service
from trustrank.runtime.services import ingress_mark_holder, ingress_override_text

UNTRACED_FALSE = ("; it sends no traces, so internal callers are possible: ranked as "
                  "exposure controlled")
UNTRACED_NONE = ("declared by a deployment but sends no traces: exposure unknown (ranked as "
                 "if open)")


def _evidence(service: Service, entries: Sequence[Entry]) -> list[str]:
    found = []
    attributes = service.attributes if isinstance(service.attributes, dict) else {}
    if service.ingress_candidate:
        client = attributes.get(INGRESS_CLIENT_ATTRIBUTE)
        found.append(f"root span from public client {client}" if client
                     else "root spans from internet addresses")
    found += routes_for(
        entries, name=service.name,
        cluster=attributes.get("k8s.cluster.name"),
        namespace=attributes.get("k8s.namespace.name"),
    )
    return found


def ingress_state(
    *, service: Service | None, declared: Deployment | None,
    entries: Sequence[Entry] | None = None,
) -> dict[str, Any]:
    """The state of a traced service (`service`, and the deployment that declares it, if
    any), or of a declared one that sends no traces (`declared` alone). `entries`: the
    team's Kubernetes entry points, when the caller has read them already."""
    holder = ingress_mark_holder(service=service, declared=declared)
    assert holder is not None
    environment = holder.environment
    if entries is None:
        entries = entry_points_read(environment.team_id)
    if service is not None:
        evidence, name = _evidence(service, entries), service.name
    else:
        assert declared is not None
        # No resource attributes say where it runs: a route naming it in any cluster counts.
        evidence = routes_for(entries, name=declared.service_name, cluster=None,
                              namespace=None)
        name = declared.service_name
    override = holder.ingress_override
    if override is not None:
        source = "operator"
        explanation = ingress_override_text(
            value=override, by=holder.ingress_set_by_label, via=holder.ingress_set_via,
            at=holder.ingress_set_at,
        )
        if not override and evidence:
            explanation += "; overrides: " + "; ".join(evidence)
        if not override and service is None:
            explanation += UNTRACED_FALSE
    elif evidence:
        source = "traces" if service is not None and service.ingress_candidate else "kubernetes"
        explanation = "; ".join(evidence)
    else:
        source = "none"
        explanation = ("no evidence that the internet reaches it" if service is not None
                       else UNTRACED_NONE)
    return {
        "environment": environment.name,
        "service": name,
        "namespace": holder.namespace,
        "team": environment.team.name,
        "ingress": override if override is not None else bool(evidence),
        "override": override,
        "source": source,
        "explanation": explanation,
        "evidence": evidence,
        "set_by": holder.ingress_set_by_label if override is not None else "",
        "set_via": holder.ingress_set_via if override is not None else "",
        "set_at": holder.ingress_set_at if override is not None else None,
        "traced": service is not None,
    }
