from django.urls import path

from trustrank.exports import views

app_name = "exports"
urlpatterns = [
    path("exports/", views.export_page, name="export-page"),
    path("exports/report", views.export_report, name="export-report"),
    path("exports/<int:export_id>/", views.export_detail_page, name="export"),
    path("exports/<int:export_id>/download", views.export_download, name="export-download"),
]
