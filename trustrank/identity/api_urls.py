from django.urls import path

from trustrank.identity import apis

# GET/POST api/v1/certificates and PUT api/v1/environments/<name>/trust-bundle are receivers
# (ingest/apis/certs.py).
urlpatterns = [
    path("certificates/<int:pk>", apis.CertificateDetailApi.as_view(), name="api-certificate"),
    path("identities", apis.IdentityListApi.as_view(), name="api-identities"),
    path("identities/<int:pk>", apis.IdentityDetailApi.as_view(), name="api-identity"),
    path("identity-findings", apis.IdentityFindingListApi.as_view(), name="api-identity-findings"),
]
