from django.urls import path

from trustrank.inventory import apis, dt_apis

urlpatterns = [
    path("projects", apis.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<int:project_id>", apis.ProjectDetailApi.as_view(), name="api-project"),
    path("projects/<int:project_id>/risk", apis.ProjectRiskApi.as_view(), name="api-project-risk"),
    path(
        "projects/<int:project_id>/components",
        apis.ProjectComponentListApi.as_view(),
        name="api-project-components",
    ),
    # Dependency-Track's routes (dt_apis.py), so its CI plugins read results unchanged.
    path("project", dt_apis.DependencyTrackProjectListApi.as_view(), name="api-dt-projects"),
    path(
        "project/lookup",
        dt_apis.DependencyTrackProjectLookupApi.as_view(),
        name="api-dt-project-lookup",
    ),
    path("project/<str:uuid>", dt_apis.DependencyTrackProjectApi.as_view(), name="api-dt-project"),
    path(
        "finding/project/<str:uuid>",
        dt_apis.DependencyTrackFindingListApi.as_view(),
        name="api-dt-findings",
    ),
    path(
        "metrics/project/<str:uuid>/current",
        dt_apis.DependencyTrackMetricsCurrentApi.as_view(),
        name="api-dt-metrics-current",
    ),
    path(
        "metrics/project/<str:uuid>/refresh",
        dt_apis.DependencyTrackMetricsRefreshApi.as_view(),
        name="api-dt-metrics-refresh",
    ),
    path(
        "violation/project/<str:uuid>",
        dt_apis.DependencyTrackViolationListApi.as_view(),
        name="api-dt-violations",
    ),
    path("team/self", dt_apis.DependencyTrackTeamSelfApi.as_view(), name="api-dt-team-self"),
]
