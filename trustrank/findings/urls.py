from django.urls import path

from trustrank.findings import views

app_name = "findings"
urlpatterns = [
    path("findings/", views.finding_list_page, name="finding-list"),
    path("findings/<int:finding_id>/", views.finding_page, name="finding"),
    path("findings/<int:finding_id>/triage", views.finding_triage_submit, name="finding-triage"),
    path("findings/<int:finding_id>/comment", views.finding_comment_submit, name="finding-comment"),
]
