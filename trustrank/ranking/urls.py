from django.urls import path

from trustrank.ranking import views

app_name = "ranking"
urlpatterns = [
    # The home page: what to fix first.
    path("", views.priorities_page, name="priorities"),
    path("priorities/status", views.priorities_status, name="priorities-status"),
    path("priorities/rank", views.priorities_rank_now, name="priorities-rank"),
]
