from django.urls import path

from trustrank.jira import views

urlpatterns = [
    path("settings/jira/", views.jira_settings_page, name="jira-settings"),
]
