"""Where a batch's events come from, for batches that name them instead of carrying them.

The apps that know how to read a source register it at start-up (AppConfig.ready), so this
low layer expands a ranking run's decision changes or a KEV import's additions without
importing the apps above it (as trustrank.jobs.registry does for job kinds).

A source is the dotted path of `events(*, batch) -> Iterable[tuple[int, str, dict]]`:
(team id, event name, payload) for each event, payloads as `trustrank.notify.payloads`
shapes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.utils.module_loading import import_string

SourceEvents = Callable[..., Iterable[tuple[int, str, dict[str, Any]]]]

_SOURCES: dict[str, str] = {}


def notify_source_register(name: str, path: str) -> None:
    _SOURCES[name] = path


def notify_source(name: str) -> SourceEvents:
    try:
        return import_string(_SOURCES[name])  # type: ignore[no-any-return]
    except KeyError:
        raise LookupError(f"no notify source {name!r} is registered") from None
