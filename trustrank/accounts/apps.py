from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "trustrank.accounts"
    label = "accounts"

    def ready(self) -> None:
        from trustrank.accounts import schema  # noqa: F401  (registers the OpenAPI extension)
