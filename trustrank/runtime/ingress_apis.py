"""`GET|PUT /api/v1/environments/<env>/services/<service>/ingress`: is the service an entry
point from the internet, and why; an operator marks it one (true), not one (false), or
returns it to the evidence (null).

The operator's word wins over the evidence both ways (`runtime.services.ingress`). Only a
service TrustRank knows (from traces, named by a caller's span, or declared by a deployment)
can be marked: an unknown one is a 404 that says so, and nothing is created, so a typo never
adds a service. A declared service that sends no traces keeps its mark on its deployment, so
the ranking still knows it sends no traces: true makes it open, false controlled (nothing
says who calls it inside), null unknown again.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.lib.api import problem
from trustrank.runtime.ingress_state import ingress_state
from trustrank.runtime.models import Deployment, Environment, IngressSetVia, NodeKind, Service
from trustrank.runtime.services import (
    IngressChangeDenied,
    declared_of,
    declared_service_ingress_set,
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
    traced = serializers.BooleanField(
        help_text="false: a deployment declares the service but it sends no traces"
    )


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


Target = tuple[Service | None, Deployment | None]


class ServiceIngressApi(APIView):
    """Whether a service is an entry point from the internet (`GET`, scope read), or the
    operator's mark (`PUT`, scope triage, as the service page's form)."""

    required_scopes = {"GET": Scope.READ, "PUT": Scope.TRIAGE}

    def _target(self, request: Request, name: str, service: str) -> Target | Response:
        """The traced service (and the deployment that declares it), else the deployment
        of a declared service that sends no traces."""
        principal = principal_for_request(request)
        envs = Environment.objects.filter(team_id__in=principal.team_ids, name=name)
        team = request.query_params.get("team", "")
        if team:
            envs = envs.filter(team__name=team)
        if not envs.exists():
            return problem(404, "Not found", f"no environment named {name!r}")
        namespace = request.query_params.get("namespace", "")
        found: list[Service] | list[Deployment] = list(
            Service.objects.filter(
                environment__in=envs, kind=NodeKind.SERVICE, name=service, namespace=namespace,
            ).select_related("environment__team")[:2]
        )
        if not found:
            found = list(Deployment.objects.filter(
                environment__in=envs, service_name=service, namespace=namespace,
            ).select_related("environment__team")[:2])
        if not found:
            return problem(
                404, "Not found",
                f"no service named {service!r} in environment {name!r}: TrustRank knows a "
                "service once its traces arrive (or a caller's span names it) or a "
                "deployment declares it (an SBOM upload naming its environment and service, "
                "or PUT .../deployment); add ?namespace= if it sets service.namespace",
            )
        if len(found) > 1:
            return problem(400, "Ambiguous", "several of your teams have this service: "
                           "name one with ?team=")
        [one] = found
        if isinstance(one, Deployment):
            return None, one
        return one, declared_of(one).select_related("environment__team").first()

    @extend_schema(parameters=PARAMS, responses=IngressOutSerializer)
    def get(self, request: Request, name: str, service: str) -> Response:
        found = self._target(request, name, service)
        if isinstance(found, Response):
            return found
        traced, declared = found
        return Response(IngressOutSerializer(
            ingress_state(service=traced, declared=declared)).data)

    @extend_schema(parameters=PARAMS, request=INGRESS_BODY, responses=IngressOutSerializer)
    def put(self, request: Request, name: str, service: str) -> Response:
        wrong = _body_problem(request.data)
        if wrong is not None:
            return problem(400, "Invalid ingress", wrong)
        found = self._target(request, name, service)
        if isinstance(found, Response):
            return found
        traced, declared = found
        principal = principal_for_request(request)
        value = request.data["ingress"]
        try:
            if traced is None:
                assert declared is not None
                declared = declared_service_ingress_set(
                    deployment=declared, principal=principal, value=value,
                    via=IngressSetVia.API)
            else:
                environment = traced.environment
                traced = service_ingress_set(service=traced, principal=principal, value=value,
                                             via=IngressSetVia.API)
                traced.environment = environment
                if declared is not None:
                    declared.refresh_from_db()
                    declared.environment = environment
        except IngressChangeDenied as exc:
            return problem(403, "Forbidden", str(exc))
        return Response(IngressOutSerializer(
            ingress_state(service=traced, declared=declared)).data)
