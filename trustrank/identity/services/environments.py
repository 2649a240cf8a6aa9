"""Identity settings helpers and the environment name: validation and the per-environment lock."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import timedelta

from django.conf import settings
from django.utils.module_loading import import_string

from trustrank.identity import engine
from trustrank.lib.locks import advisory_xact_lock

ENVIRONMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def strength_rules() -> engine.StrengthRules:
    return engine.StrengthRules.from_mapping(settings.TRUSTRANK_IDENTITY_STRENGTH)


def mapping_rules() -> engine.MappingRules:
    return engine.MappingRules.compile(
        settings.TRUSTRANK_IDENTITY_MAPPING_RULES, settings.TRUSTRANK_IDENTITY_MAPPING_EXCLUDE
    )


def expiry_window() -> timedelta:
    return timedelta(days=settings.TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS)


def expiry_rules() -> engine.ExpiryRules:
    return engine.ExpiryRules(
        fraction=settings.TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION,
        floor=timedelta(hours=settings.TRUSTRANK_IDENTITY_EXPIRY_FLOOR_HOURS),
        min_rotations=settings.TRUSTRANK_IDENTITY_ROTATION_MIN_OBSERVED,
    )


def _service_catalog(team_id: int, environment: str) -> set[tuple[str, str]] | None:
    """Known services (name, namespace) when a catalog is configured, else None (a rule's
    answer is then taken as is). The runtime app can provide one without this app importing
    it: TRUSTRANK_IDENTITY_SERVICE_CATALOG = "dotted.path(team_id, environment)"."""
    path = settings.TRUSTRANK_IDENTITY_SERVICE_CATALOG
    if not path:
        return None
    func: Callable[..., Iterable[tuple[str, str]]] = import_string(path)
    return {(name, namespace or "") for name, namespace in func(team_id, environment)}


def environment_lock(*, team_id: int, environment: str) -> None:
    """Serialise writers of one (team, environment) until the transaction ends.

    Two workers loading certificates for the same environment would otherwise race to
    create the same identity or finding rows; the lock is cheaper than retrying.
    """
    advisory_xact_lock(f"trustrank.identity:{team_id}:{environment}")


class InvalidEnvironment(ValueError):
    """An environment name TrustRank does not accept."""


def environment_validate(name: str) -> str:
    name = (name or "").strip() or "default"
    if not ENVIRONMENT_RE.match(name):
        raise InvalidEnvironment(
            f"environment {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name

