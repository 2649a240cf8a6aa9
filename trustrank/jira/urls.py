from django.urls import path

from trustrank.jira import views

urlpatterns = [
    path("settings/jira/", views.jira_settings_page, name="jira-settings"),
    path("findings/<int:finding_id>/jira/", views.finding_jira_open_submit,
         name="finding-jira-open"),
]
