from django.urls import path

from trustrank.jira import apis

urlpatterns = [
    path("jira", apis.JiraConfigApi.as_view(), name="api-jira"),
]
