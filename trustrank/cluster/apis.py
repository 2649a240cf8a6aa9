from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.cluster import services
from trustrank.cluster.models import ClusterWorkload, ReplayRun
from trustrank.cluster.selectors import (
    cluster_get_for_principal,
    replay_run_get_for_principal,
    replay_run_list,
    workload_list,
)
from trustrank.cluster.serializers import (
    ClusterDiagnoseRequestedSerializer,
    ClusterWorkloadSerializer,
    ReplayRunCreateSerializer,
    ReplayRunSerializer,
)
from trustrank.cluster.services.diagnoses import cluster_diagnose_request
from trustrank.lib.api import problem


class ReplayRunListCreateApi(ListAPIView[ReplayRun]):
    """GET: the runs of the principal's teams. POST: start a run (202; poll `status_url`)."""

    serializer_class = ReplayRunSerializer
    required_scopes = {"GET": "read", "POST": services.CREATE_SCOPE}
    queryset = ReplayRun.objects.none()  # for the schema; get_queryset scopes the real one

    def get_queryset(self) -> Any:
        return replay_run_list(principal=principal_for_request(self.request))

    def post(self, request: Request) -> Response:
        incoming = ReplayRunCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        pods, nodes = data.get("pods"), data.get("nodes")
        try:
            params = services.replay_params_validate(
                mode=data["mode"],
                strategies=data["strategies"],
                seeds=data["seeds"],
                policies=data["policies"],
                placement=data["placement"],
                compress=data["compress"],
                node_fraction=data["node_fraction"],
                hints=data["hints"],
            )
            run = services.replay_run_create(
                principal=principal_for_request(request),
                params=params,
                team_hint=data["team"],
                pods_csv=pods.read() if pods else None,
                nodes_csv=nodes.read() if nodes else None,
                trace_label=f"{pods.name} + {nodes.name}" if pods and nodes else "",
                cluster_name=data["cluster"],
            )
        except services.ReplayError as exc:
            extra = {"errors": {exc.field: [str(exc)]}} if exc.field else {}
            return problem(status.HTTP_400_BAD_REQUEST, "Bad request", str(exc), **extra)
        status_url = reverse("api-replay-run", kwargs={"run_id": run.pk})
        return Response(
            {"id": run.pk, "status": run.status, "status_url": status_url},
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": status_url},
        )


class ReplayRunDetailApi(RetrieveAPIView[ReplayRun]):
    serializer_class = ReplayRunSerializer

    def get_object(self) -> ReplayRun:
        return replay_run_get_for_principal(
            principal=principal_for_request(self.request), run_id=self.kwargs["run_id"]
        )


class ClusterWorkloadListApi(ListAPIView[ClusterWorkload]):
    """Workloads of one cluster: declared and recommended priorities, reasons, diagnoses.
    `ordering` = declared, -declared, recommended or -recommended (default: disagreements
    first); `team` picks the team when several of yours name a cluster alike."""

    serializer_class = ClusterWorkloadSerializer
    queryset = ClusterWorkload.objects.none()  # for the schema; get_queryset scopes the real one

    def get_queryset(self) -> Any:
        cluster = cluster_get_for_principal(
            principal=principal_for_request(self.request), name=self.kwargs["cluster"],
            team=self.request.query_params.get("team", ""),
        )
        return workload_list(
            cluster=cluster, ordering=self.request.query_params.get("ordering", "")
        )


DIAGNOSE_SCOPES = (Scope.METRICS_WRITE, Scope.TELEMETRY_WRITE)


class ClusterDiagnoseApi(APIView):
    """POST: diagnose the cluster now instead of after the debounce that follows a load
    (202; the workloads list shows the result once `diagnosed_at` passes `requested_at`).
    For whoever may send the cluster's evidence (`metrics:write`)."""

    required_scope = DIAGNOSE_SCOPES

    @extend_schema(request=None, responses={202: ClusterDiagnoseRequestedSerializer})
    def post(self, request: Request, cluster: str) -> Response:
        principal = principal_for_request(request)
        found = cluster_get_for_principal(
            principal=principal, name=cluster, team=request.query_params.get("team", ""),
        )
        if not any(principal.can(scope, found.team_id) for scope in DIAGNOSE_SCOPES):
            raise PermissionDenied("This credential lacks 'metrics:write' in the cluster's team.")
        requested = cluster_diagnose_request(cluster_id=found.pk, delay=0)
        return Response({"cluster": found.name, "requested_at": requested},
                        status=status.HTTP_202_ACCEPTED)
