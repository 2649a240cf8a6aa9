from django.urls import path

from trustrank.runtime import views

app_name = "runtime"
urlpatterns = [
    path("services/", views.service_map, name="service-map"),
    path("services/<int:pk>/", views.service_detail, name="service-detail"),
    path("services/<int:pk>/ingress", views.service_ingress, name="service-ingress"),
    path("services/<int:pk>/deployment", views.service_deployment, name="service-deployment"),
    path(
        "services/traces/<int:environment_pk>/<str:trace_id>/",
        views.trace_detail,
        name="trace-detail",
    ),
]
