from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "trustrank.exports"
    label = "exports"
    verbose_name = "Exports of findings"
