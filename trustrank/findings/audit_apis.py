"""GET /api/v1/audit-events: the audit log of the caller's teams, newest first, paginated with
`count`, filtered by AuditEventFilterSet (as on the /audit/ page)."""

from __future__ import annotations

from typing import Any

from rest_framework.generics import ListAPIView

from trustrank.accounts.models import Scope
from trustrank.accounts.principal import principal_for_request
from trustrank.findings.audit_filters import AuditEventFilterSet
from trustrank.findings.audit_selectors import audit_event_list
from trustrank.findings.audit_serializers import AuditEventSerializer
from trustrank.findings.records import AuditEvent


class AuditEventListApi(ListAPIView[AuditEvent]):
    """Audit events (who, what, when, before, after, why, and the hash-chain links) of the
    caller's teams. `read` or `audit:read`."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    required_scope = (Scope.READ, Scope.AUDIT_READ)

    def get_queryset(self) -> Any:
        return audit_event_list(principal=principal_for_request(self.request))
