from django.urls import path

from trustrank.inventory import apis

urlpatterns = [
    path("projects", apis.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>", apis.ProjectDetailApi.as_view(), name="api-project"),
    path("projects/<int:project_id>/risk", apis.ProjectRiskApi.as_view(), name="api-project-risk"),
    path(
        "projects/<int:project_id>/components",
        apis.ProjectComponentListApi.as_view(),
        name="api-project-components",
    ),
]
