from django.urls import path

from trustrank.jira import apis

urlpatterns = [
    path("jira", apis.JiraConfigApi.as_view(), name="api-jira"),
    path("findings/<int:finding_id>/jira", apis.FindingJiraApi.as_view(),
         name="api-finding-jira"),
]
