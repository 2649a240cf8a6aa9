from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "trustrank.runtime"
    label = "runtime"
