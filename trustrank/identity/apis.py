"""Read API for identity evidence (the receivers live in ingest/apis/certs.py)."""

from __future__ import annotations

from typing import Any

from rest_framework.generics import ListAPIView, RetrieveAPIView

from trustrank.accounts.principal import principal_for_request
from trustrank.findings.models import Finding
from trustrank.identity import selectors
from trustrank.identity.filters import IdentityFilterSet, IdentityFindingFilterSet
from trustrank.identity.models import Certificate, Identity
from trustrank.identity.serializers import (
    CertificateSerializer,
    IdentityFindingSerializer,
    IdentitySerializer,
)


class CertificateDetailApi(RetrieveAPIView[Certificate]):
    serializer_class = CertificateSerializer

    def get_object(self) -> Certificate:
        return selectors.certificate_get(
            principal=principal_for_request(self.request), certificate_id=self.kwargs["pk"]
        )


class IdentityListApi(ListAPIView[Identity]):
    serializer_class = IdentitySerializer
    filterset_class = IdentityFilterSet

    def get_queryset(self) -> Any:
        return selectors.identity_list(principal=principal_for_request(self.request))


class IdentityDetailApi(RetrieveAPIView[Identity]):
    serializer_class = IdentitySerializer

    def get_object(self) -> Identity:
        return selectors.identity_get(
            principal=principal_for_request(self.request), identity_id=self.kwargs["pk"]
        )


class IdentityFindingListApi(ListAPIView[Finding]):
    serializer_class = IdentityFindingSerializer
    filterset_class = IdentityFindingFilterSet

    def get_queryset(self) -> Any:
        return selectors.finding_list(principal=principal_for_request(self.request))
