from django.urls import path

from trustrank.runtime import apis, ingress_apis

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
        "environments/<str:name>/services/<str:service>/ingress",
        ingress_apis.ServiceIngressApi.as_view(),
        name="runtime-service-ingress",
    ),
    path(
        "environments/<str:name>/edges",
        apis.EdgeListApi.as_view(),
        name="runtime-environment-edges",
    ),
]
