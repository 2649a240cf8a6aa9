from django.apps import AppConfig


class JiraAppConfig(AppConfig):
    name = "trustrank.jira"
    label = "jira"
    verbose_name = "Jira issues for findings"
