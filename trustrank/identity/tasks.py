"""Thin Celery tasks for identity evidence."""

from __future__ import annotations

from celery import shared_task

from trustrank.identity import services


@shared_task(acks_late=True)
def identity_reevaluate() -> dict[str, int]:
    """Periodic: expiry moves with the clock, so statuses and findings are recomputed."""
    return services.identity_environments_reevaluate()


@shared_task(acks_late=True)
def identity_policies_check() -> dict[str, int]:
    """Periodic: observed call edges (runtime graph) against the services' caller policies."""
    return services.identity_policies_check()
