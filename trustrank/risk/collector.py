"""The cyclic garbage collector, paused while a run makes millions of small objects."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

# How often the outermost pause walks everything, frozen objects included (see below).
FULL_COLLECTION_SECONDS = 3600.0
_last_full = time.monotonic()


@contextmanager
def collector_paused() -> Iterator[None]:
    """A ranking run (the engine's queue, the store's rows) allocates millions of small
    tuples and creates no reference cycles; the cyclic collector would otherwise walk the
    whole, growing heap again and again (a third of the run time at a million findings).

    Paused, the collector still counts what was made: its first pass after the pause walked
    every object the run kept (the queue a worker keeps for the next incremental run, ten
    million tuples: 3–4 s at ten million findings), and the older generations' passes walked
    them again later. So the outermost pause first collects what is garbage already, and on
    leaving freezes what is alive (`gc.freeze`): the collector ignores it from then on, and
    each object is still freed by its reference count when a later run drops it. What
    could stay is an object alive at a freeze that later becomes part of a garbage cycle
    (runs make none; a job's frames might): once an hour the outermost pause unfreezes
    everything and collects it all, one walk of what the worker keeps.
    Restores the collector as it was."""
    global _last_full
    enabled = gc.isenabled()
    if enabled:
        if time.monotonic() - _last_full >= FULL_COLLECTION_SECONDS:
            gc.unfreeze()
            _last_full = time.monotonic()
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()
