from django.urls import path

from trustrank.cluster import apis

urlpatterns = [
    path("replay-runs", apis.ReplayRunListCreateApi.as_view(), name="api-replay-runs"),
    path("replay-runs/<int:run_id>", apis.ReplayRunDetailApi.as_view(), name="api-replay-run"),
    path("clusters/<str:cluster>/workloads", apis.ClusterWorkloadListApi.as_view(),
         name="api-cluster-workloads"),
    path("clusters/<str:cluster>/diagnoses", apis.ClusterDiagnoseApi.as_view(),
         name="api-cluster-diagnose"),
]
