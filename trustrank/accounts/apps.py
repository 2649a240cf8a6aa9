from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "trustrank.accounts"
    label = "accounts"
