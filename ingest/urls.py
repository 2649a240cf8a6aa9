from django.urls import path

from ingest import views

urlpatterns = [
    path("jobs/", views.job_list_page, name="jobs"),
    path("jobs/<str:job_id>/", views.job_page, name="job"),
]
