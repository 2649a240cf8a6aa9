from django.urls import path

from trustrank.ranking import apis

urlpatterns = [
    path("priorities", apis.PriorityListApi.as_view(), name="api-priorities"),
    path("ranking-runs", apis.RankingRunListApi.as_view(), name="api-ranking-runs"),
    path("ranking-runs/<int:run_id>", apis.RankingRunDetailApi.as_view(), name="api-ranking-run"),
    path(
        "ranking-runs/<int:run_id>/changes",
        apis.RankingRunChangesApi.as_view(),
        name="api-ranking-run-changes",
    ),
]
