from django.apps import AppConfig


class GateConfig(AppConfig):
    name = "trustrank.gate"
    label = "gate"
    verbose_name = "Build gate"
