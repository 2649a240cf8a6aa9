"""Receivers: every route that accepts evidence. Each stream's module owns its routes."""

from django.urls import include, path

urlpatterns = [
    path("", include("ingest.apis.sbom")),
    path("", include("ingest.apis.jobs")),
    path("", include("ingest.apis.otlp")),
    path("", include("ingest.apis.feeds")),
    path("", include("ingest.apis.certs")),
    path("", include("ingest.apis.metrics")),
    path("", include("ingest.apis.vex")),
]
