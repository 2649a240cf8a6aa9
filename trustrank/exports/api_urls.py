from django.urls import path

from trustrank.exports import apis

urlpatterns = [
    path("exports", apis.ExportsApi.as_view(), name="api-exports"),
    path("exports/<int:export_id>", apis.ExportDetailApi.as_view(), name="api-export"),
    path(
        "exports/<int:export_id>/download",
        apis.ExportDownloadApi.as_view(),
        name="api-export-download",
    ),
]
