from django.apps import AppConfig


class FindingsConfig(AppConfig):
    name = "trustrank.findings"
    label = "findings"
    verbose_name = "Findings and audit"
