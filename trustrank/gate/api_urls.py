from django.urls import path

from trustrank.gate import apis

urlpatterns = [
    path("gate", apis.GateApi.as_view(), name="api-gate"),
    path("gate/policy", apis.GatePolicyApi.as_view(), name="api-gate-policy"),
]
