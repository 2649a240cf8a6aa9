"""REST API for findings of every kind: list (filters as on the page), detail, triage and
comments."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings import selectors
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.models import Finding, FindingKind
from trustrank.findings.serializers import (
    CommentSerializer,
    FindingSerializer,
    TriageSerializer,
)
from trustrank.findings.services.triage import (
    TriageError,
    TriageForbidden,
    finding_comment_add,
    finding_triage,
)
from trustrank.lib.api import problem
from trustrank.vulns import selectors as vuln_selectors


class FindingListApi(ListAPIView[Finding]):
    """Findings of every kind (filter `kind`) of the caller's teams, highest baseline
    priority first."""

    serializer_class = FindingSerializer
    filterset_class = FindingFilterSet
    required_scope = Scope.READ

    def get_queryset(self) -> Any:
        return selectors.finding_list(principal=principal_for_request(self.request))


def finding_detail_data(*, finding: Finding) -> dict[str, Any]:
    data = dict(FindingSerializer(finding).data)
    data["comments"] = [
        {"id": c.pk, "author": c.author_label, "body": c.body, "created_at": c.created_at}
        for c in selectors.finding_comments(finding=finding)
    ]
    data["audit"] = [
        {
            "action": e.action,
            "actor": e.actor_label,
            "actor_kind": e.actor_kind,
            "at": e.created_at,
            "before": e.before,
            "after": e.after,
            "reason": e.reason,
        }
        for e in selectors.finding_audit_trail(finding=finding)
    ]
    if finding.kind != FindingKind.VULNERABILITY:
        return data
    advisories = vuln_selectors.advisories_for_finding(finding=finding)
    data["advisories"] = [
        {
            "id": a.id,
            "aliases": a.aliases,
            "summary": a.summary,
            "details": a.details,
            "severity": a.severity,
            "cvss_score": a.cvss_score,
            "published": a.published,
            "modified": a.modified,
            "withdrawn": a.withdrawn,
            "references": a.references,
            "affected": vuln_selectors.affected_for_package(
                advisory=a, ecosystem=finding.ecosystem, package_name=finding.package_name
            ),
        }
        for a in advisories
    ]
    kev = vuln_selectors.kev_entry_for(cve_id=finding.cve_id)
    data["kev"]["entry"] = (
        None
        if kev is None
        else {
            "cve_id": kev.cve_id,
            "vendor_project": kev.vendor_project,
            "product": kev.product,
            "vulnerability_name": kev.vulnerability_name,
            "date_added": kev.date_added,
            "due_date": kev.due_date,
            "required_action": kev.required_action,
            "known_ransomware_campaign_use": kev.known_ransomware_campaign_use,
        }
    )
    data["epss"]["history"] = [
        {
            "date": s.score_date,
            "probability": s.epss,
            "percentile": s.percentile,
            "model_version": s.model_version,
        }
        for s in vuln_selectors.epss_history_for(cve_id=finding.cve_id)
    ]
    data["vex_evidence"] = finding.vex_evidence
    return data


class FindingDetailApi(APIView):
    required_scope = Scope.READ

    @extend_schema(responses=FindingSerializer)
    def get(self, request: Request, finding_id: int) -> Response:
        finding = selectors.finding_get_for_principal(
            principal=principal_for_request(request), finding_id=finding_id
        )
        return Response(finding_detail_data(finding=finding))


class FindingTriageApi(APIView):
    """Change the VEX state: {state, justification, response[], detail, reason}."""

    required_scope = Scope.TRIAGE

    @extend_schema(request=TriageSerializer, responses=FindingSerializer)
    def post(self, request: Request, finding_id: int) -> Response:
        principal = principal_for_request(request)
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
        form = TriageSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            finding = finding_triage(finding=finding, principal=principal, **form.validated_data)
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except TriageError as exc:
            return problem(400, "Invalid triage change", str(exc))
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding.pk)
        return Response(FindingSerializer(finding).data)


class FindingCommentApi(APIView):
    required_scope = Scope.TRIAGE

    @extend_schema(request=CommentSerializer, responses={201: None})
    def post(self, request: Request, finding_id: int) -> Response:
        principal = principal_for_request(request)
        finding = selectors.finding_get_for_principal(principal=principal, finding_id=finding_id)
        form = CommentSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            comment = finding_comment_add(
                finding=finding, principal=principal, body=form.validated_data["body"]
            )
        except TriageForbidden as exc:
            return problem(403, "Forbidden", str(exc))
        except TriageError as exc:
            return problem(400, "Invalid comment", str(exc))
        return Response(
            {
                "id": comment.pk,
                "author": comment.author_label,
                "body": comment.body,
                "created_at": comment.created_at,
            },
            status=201,
        )
