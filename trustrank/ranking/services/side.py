"""Work a ranking run hands to a second database connection while its own stores the
queue: PostgreSQL takes a large queue on one backend for a minute, and a second backend
does this work on the other core meanwhile.

Only work whose result may stand without the run goes here: the thread's transaction
commits on its own, so should the run fail afterwards, what it wrote stays (the
first-run due dates, which the next run checks again; contexts and per-service results,
stored by the digest of their content and shared by every run that found the same)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import connection, transaction

T = TypeVar("T")


class SideWrite(Generic[T]):
    """`work()` in a thread, in a transaction of its own connection (closed after)."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with connection.cursor() as cur:
                # As the run's own connection (`runs._run_settings`): derived data.
                cur.execute("SET synchronous_commit = off")
            with transaction.atomic():
                self._value = self._work()
        except BaseException as exc:  # re-raised by result(), in the run's thread
            self._error = exc
        finally:
            connection.close()

    def wait(self) -> None:
        """Wait for the thread, whatever it did (the run failed: its error is the run's)."""
        self._thread.join()

    def result(self) -> T:
        """Wait for the thread; what `work` returned, or its error raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
