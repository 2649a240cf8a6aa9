"""Checks a server process runs before it answers its first request."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def static_files_check() -> None:
    """With the manifest storage (production), every page that links a stylesheet or a
    script needs the manifest `collectstatic` writes; without it each page answered 500.
    Refuse to start instead, saying what to run."""
    backend = settings.STORAGES["staticfiles"]["BACKEND"]
    if "Manifest" not in backend:
        return
    manifest = Path(settings.STATIC_ROOT) / "staticfiles.json"
    if not manifest.is_file():
        raise ImproperlyConfigured(
            f"Static files are not collected ({manifest} is missing): run "
            "`python manage.py collectstatic --noinput` before starting the web server "
            "(or set DEBUG=true for development)."
        )
