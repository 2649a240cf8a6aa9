from django.urls import path

from trustrank.runtime import apis

urlpatterns = [
    path("environments", apis.EnvironmentListApi.as_view(), name="runtime-environments"),
    path(
        "environments/<str:name>/services",
        apis.ServiceListApi.as_view(),
        name="runtime-environment-services",
    ),
    path(
        "environments/<str:name>/services/<str:service>/deployment",
        apis.DeploymentApi.as_view(),
        name="runtime-service-deployment",
    ),
    path(
        "environments/<str:name>/edges",
        apis.EdgeListApi.as_view(),
        name="runtime-environment-edges",
    ),
]
