from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "trustrank.identity"
    label = "identity"
