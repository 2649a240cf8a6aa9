from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from trustrank.inventory import dt_apis

urlpatterns = [
    path("", include("trustrank.accounts.urls")),
    path("", include("trustrank.ranking.urls")),
    path("", include("trustrank.inventory.urls")),
    path("", include("ingest.urls")),
    path("", include("trustrank.findings.urls")),
    path("", include("trustrank.runtime.urls")),
    path("", include("ingest.identity_urls")),
    path("", include("trustrank.cluster.urls")),
    path("", include("trustrank.exports.urls")),
    path("", include("trustrank.gate.urls")),
    path("", include("trustrank.jira.urls")),
    path("", include("trustrank.notify.urls")),
    # Receivers (REST under api/v1/, OTLP at v1/traces).
    path("", include("ingest.api_urls")),
    path("api/v1/", include("trustrank.inventory.api_urls")),
    path("api/version", dt_apis.DependencyTrackVersionApi.as_view(), name="api-dt-version"),
    path("api/v1/", include("trustrank.findings.api_urls")),
    path("api/v1/", include("trustrank.runtime.api_urls")),
    path("api/v1/", include("trustrank.identity.api_urls")),
    path("api/v1/", include("trustrank.ranking.api_urls")),
    path("api/v1/", include("trustrank.cluster.api_urls")),
    path("api/v1/", include("trustrank.exports.api_urls")),
    path("api/v1/", include("trustrank.gate.api_urls")),
    path("api/v1/", include("trustrank.jira.api_urls")),
    path("api/v1/", include("trustrank.notify.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler404 = "trustrank.lib.error_pages.not_found"
handler500 = "trustrank.lib.error_pages.server_error"
