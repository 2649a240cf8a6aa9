from django.urls import path

from trustrank.cluster import views

app_name = "cluster"
urlpatterns = [
    path("replay/", views.replay_list, name="replay-list"),
    path("replay/<int:run_id>/", views.replay_detail, name="replay-detail"),
]
