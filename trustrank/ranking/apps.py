from django.apps import AppConfig


class RankingConfig(AppConfig):
    name = "trustrank.ranking"
    label = "ranking"
    verbose_name = "Contextual ranking"
