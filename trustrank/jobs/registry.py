"""Which kinds of job exist: each app registers its kinds when Django starts (AppConfig.ready),
so this lower layer runs them without importing the apps above it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import import_string

# handler(job, progress) -> the fields to store on the finished row ({} for none).
Handler = Callable[..., dict[str, Any] | None]


@dataclass(frozen=True)
class JobKind:
    """A kind of long work: its row model and the function that does it.

    - `handler`: dotted path of `handler(*, job, progress) -> dict | None`. It must be safe
      to run again from the start after a worker died at any point of it (upserts, a cursor
      on the row, a file written under a temporary name...).
    - `atomic`: the handler runs in one transaction with the row's finish, so a killed
      attempt leaves nothing and the next one starts clean (or the dotted path of a
      predicate `atomic(job) -> bool`, when it depends on the job).
    - `cleanup`: dotted path of `cleanup(*, job)`, called before a new attempt of a job whose
      earlier attempt died (remove its half-written files...), and when it fails.
    - `on_done`: dotted path of `on_done(*, job)`, called after the row is marked done.
    - `ready_field`: a datetime field before which the job must not start (a debounce).
    - `batch_capable`: rows of this kind may be batch work (their `job_class` says which).
    - `queued_max_per_team`: more queued jobs of this kind for one team are refused (429).
    - `hide_internal_errors`: a crash is reported to the user without the exception's text.
    """

    name: str
    model_path: str
    handler: str
    atomic: bool | str = False
    cleanup: str = ""
    on_done: str = ""
    ready_field: str = ""
    batch_capable: bool = False
    queued_max_per_team: int | None = None
    hide_internal_errors: bool = False

    @property
    def model(self) -> Any:
        from django.apps import apps

        return apps.get_model(self.model_path)

    @property
    def table(self) -> str:
        return str(self.model._meta.db_table)

    def call(self, path: str, **kwargs: Any) -> Any:
        return import_string(path)(**kwargs) if path else None


_KINDS: dict[str, JobKind] = {}


def job_kind_register(kind: JobKind) -> None:
    _KINDS[kind.name] = kind


def job_kind(name: str) -> JobKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise LookupError(f"no job kind {name!r} is registered") from None


def job_kinds() -> list[JobKind]:
    return sorted(_KINDS.values(), key=lambda k: k.name)


def job_kind_of(model: Any) -> JobKind:
    label = model._meta.label
    for kind in _KINDS.values():
        if kind.model_path == label:
            return kind
    raise LookupError(f"{label} is not a registered job model")
