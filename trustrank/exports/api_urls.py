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
    # Dependency-Track's route, so its clients fetch a project version's VEX unchanged.
    path(
        "vex/cyclonedx/project/<uuid:uuid>",
        apis.ProjectVexApi.as_view(),
        name="api-project-vex",
    ),
]
