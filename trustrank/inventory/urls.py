from django.urls import path

from trustrank.inventory import views

app_name = "inventory"
urlpatterns = [
    path("projects/", views.project_list_page, name="projects"),
    path("projects/<int:project_id>/", views.project_page, name="project"),
]
