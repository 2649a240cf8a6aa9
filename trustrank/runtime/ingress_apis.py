"""`GET|PUT /api/v1/environments/<env>/services/<service>/ingress`: is the service an entry
point from the internet, and why; an operator marks it one (true), not one (false), or
returns it to the evidence (null).

The operator's word wins over the evidence both ways (`runtime.services.ingress`). Only a
service TrustRank knows (from traces, or named by a caller's span) can be marked: an unknown
one is a 404 that says so, and nothing is created, so a typo never adds a service.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.cluster.selectors import entry_point_routes
from trustrank.lib.api import problem
from trustrank.runtime.engine import INGRESS_CLIENT_ATTRIBUTE
from trustrank.runtime.models import Environment, IngressSetVia, NodeKind, Service
from trustrank.runtime.services import (
    IngressChangeDenied,
    ingress_override_text,
    service_ingress_set,
)


class IngressOutSerializer(serializers.Serializer):
    environment = serializers.CharField()
    service = serializers.CharField()
    namespace = serializers.CharField()
    team = serializers.CharField()
    ingress = serializers.BooleanField(help_text="Whether ranking treats it as an entry point")
    override = serializers.BooleanField(
        allow_null=True, help_text="The operator's mark: true, false, or null (the evidence)"
    )
    source = serializers.ChoiceField(
        choices=["operator", "traces", "kubernetes", "none"],
        help_text="What decides `ingress`: the operator's mark, root spans from public "
        "clients, a Kubernetes LoadBalancer/NodePort Service, Ingress or HTTPRoute, or nothing",
    )
    explanation = serializers.CharField()
    evidence = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the evidence says, whatever the operator's mark",
    )
    set_by = serializers.CharField(allow_blank=True)
    set_via = serializers.CharField(allow_blank=True, help_text="api or page, when marked")
    set_at = serializers.DateTimeField(allow_null=True)


INGRESS_BODY = inline_serializer(
    "IngressIn",
    {"ingress": serializers.BooleanField(
        allow_null=True,
        help_text="true: an entry point; false: not one (wins over the evidence); null: "
        "clear the mark",
    )},
)
PARAMS = [
    OpenApiParameter("namespace", str, description="service.namespace, if any"),
    OpenApiParameter("team", str, description="Team name, when several of yours have the env"),
]


def _evidence(service: Service) -> list[str]:
    found = []
    attributes = service.attributes if isinstance(service.attributes, dict) else {}
    if service.ingress_candidate:
        client = attributes.get(INGRESS_CLIENT_ATTRIBUTE)
        found.append(f"root span from public client {client}" if client
                     else "root spans from internet addresses")
    found += entry_point_routes(
        team_id=service.environment.team_id, name=service.name,
        cluster=attributes.get("k8s.cluster.name"),
        namespace=attributes.get("k8s.namespace.name"),
    )
    return found


def ingress_state(service: Service) -> dict[str, Any]:
    evidence = _evidence(service)
    override = service.ingress_override
    if override is not None:
        source = "operator"
        explanation = ingress_override_text(
            value=override, by=service.ingress_set_by_label, via=service.ingress_set_via,
            at=service.ingress_set_at,
        )
        if not override and evidence:
            explanation += "; overrides: " + "; ".join(evidence)
    elif evidence:
        source = "traces" if service.ingress_candidate else "kubernetes"
        explanation = "; ".join(evidence)
    else:
        source, explanation = "none", "no evidence that the internet reaches it"
    return {
        "environment": service.environment.name,
        "service": service.name,
        "namespace": service.namespace,
        "team": service.environment.team.name,
        "ingress": override if override is not None else bool(evidence),
        "override": override,
        "source": source,
        "explanation": explanation,
        "evidence": evidence,
        "set_by": service.ingress_set_by_label,
        "set_via": service.ingress_set_via,
        "set_at": service.ingress_set_at,
    }


def _body_problem(data: object) -> str | None:
    if not isinstance(data, dict):
        return f"the body must be a JSON object {{\"ingress\": true|false|null}}, " \
               f"got {type(data).__name__}"
    extra = sorted(set(data) - {"ingress"})
    if extra:
        return f"unknown field(s): {', '.join(map(repr, extra))}; only 'ingress' is accepted"
    if "ingress" not in data:
        return "'ingress' is required: true, false or null"
    if data["ingress"] is not None and not isinstance(data["ingress"], bool):
        return f"'ingress' must be true, false or null, got {data['ingress']!r}"
    return None


class ServiceIngressApi(APIView):
    """Whether a service is an entry point from the internet (`GET`, scope read), or the
    operator's mark (`PUT`, scope triage, as the service page's form)."""

    required_scopes = {"GET": Scope.READ, "PUT": Scope.TRIAGE}

    def _service(self, request: Request, name: str, service: str) -> Service | Response:
        principal = principal_for_request(request)
        envs = Environment.objects.filter(team_id__in=principal.team_ids, name=name)
        team = request.query_params.get("team", "")
        if team:
            envs = envs.filter(team__name=team)
        if not envs.exists():
            return problem(404, "Not found", f"no environment named {name!r}")
        found = list(
            Service.objects.filter(
                environment__in=envs, kind=NodeKind.SERVICE, name=service,
                namespace=request.query_params.get("namespace", ""),
            ).select_related("environment__team")[:2]
        )
        if not found:
            return problem(
                404, "Not found",
                f"no service named {service!r} in environment {name!r}: TrustRank knows a "
                "service once its traces arrive (or a caller's span names it); add "
                "?namespace= if it sets service.namespace",
            )
        if len(found) > 1:
            return problem(400, "Ambiguous", "several of your teams have this service: "
                           "name one with ?team=")
        return found[0]

    @extend_schema(parameters=PARAMS, responses=IngressOutSerializer)
    def get(self, request: Request, name: str, service: str) -> Response:
        found = self._service(request, name, service)
        if isinstance(found, Response):
            return found
        return Response(IngressOutSerializer(ingress_state(found)).data)

    @extend_schema(parameters=PARAMS, request=INGRESS_BODY, responses=IngressOutSerializer)
    def put(self, request: Request, name: str, service: str) -> Response:
        wrong = _body_problem(request.data)
        if wrong is not None:
            return problem(400, "Invalid ingress", wrong)
        found = self._service(request, name, service)
        if isinstance(found, Response):
            return found
        try:
            updated = service_ingress_set(
                service=found, principal=principal_for_request(request),
                value=request.data["ingress"], via=IngressSetVia.API,
            )
        except IngressChangeDenied as exc:
            return problem(403, "Forbidden", str(exc))
        updated.environment = found.environment
        return Response(IngressOutSerializer(ingress_state(updated)).data)
