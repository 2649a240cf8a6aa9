from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.generics import ListAPIView, RetrieveAPIView

from ingest.filters import IngestJobFilterSet
from ingest.models import IngestJob
from ingest.selectors import job_get, job_list
from ingest.serializers import IngestJobSerializer
from trustrank.accounts.models import FEEDS_WRITE, Scope
from trustrank.accounts.principal import principal_for_request

# A pipeline's key may only hold a write scope; it must still see the jobs it submitted.
ANY_SCOPE = (*Scope.values, FEEDS_WRITE)


class JobListApi(ListAPIView[IngestJob]):
    serializer_class = IngestJobSerializer
    filterset_class = IngestJobFilterSet
    required_scope = ANY_SCOPE

    def get_queryset(self) -> Any:
        return job_list(principal=principal_for_request(self.request))


class JobDetailApi(RetrieveAPIView[IngestJob]):
    serializer_class = IngestJobSerializer
    required_scope = ANY_SCOPE

    def get_object(self) -> IngestJob:
        return job_get(principal=principal_for_request(self.request), job_id=self.kwargs["job_id"])


urlpatterns = [
    path("api/v1/jobs", JobListApi.as_view(), name="api-jobs"),
    path("api/v1/jobs/<str:job_id>", JobDetailApi.as_view(), name="api-job"),
]
