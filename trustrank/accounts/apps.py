from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "trustrank.accounts"
    label = "accounts"

    def ready(self) -> None:
        # Every process that runs Django (web, worker, commands, tests) needs the project's
        # Celery app configured before a task is sent; trustrank/__init__.py no longer
        # imports it, so the pure layers can be imported without Django.
        import trustrank.celery  # noqa: F401
        from trustrank.accounts import schema  # noqa: F401  (registers the OpenAPI extension)
