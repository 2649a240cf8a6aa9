from django.apps import AppConfig


class VulnsConfig(AppConfig):
    name = "trustrank.vulns"
    label = "vulns"
