from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "trustrank.cluster"
    label = "cluster"
    verbose_name = "Cluster scheduling"
