from django.urls import path

from trustrank.cluster import views

app_name = "cluster"
urlpatterns = [
    path("replay/", views.replay_list, name="replay-list"),
    path("replay/<int:run_id>/", views.replay_detail, name="replay-detail"),
    path("clusters/", views.cluster_list_page, name="cluster-list"),
    path("clusters/<str:cluster>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<str:cluster>/workloads/<path:key>/", views.workload_detail,
         name="workload-detail"),
]
