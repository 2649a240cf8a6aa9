"""TrustRank.

The Celery app is loaded lazily (PEP 562) rather than imported here: `trustrank.parsers` and
`trustrank.risk` must import without Django, and every `import trustrank.x` runs this file.
Django loads the app at start-up (AccountsConfig.ready); `celery -A trustrank` finds it
through `trustrank.app`.
"""

from __future__ import annotations

from typing import Any

__all__ = ("celery_app",)


def __getattr__(name: str) -> Any:
    if name in ("app", "celery_app"):
        from trustrank.celery import app

        return app
    raise AttributeError(f"module 'trustrank' has no attribute {name!r}")
