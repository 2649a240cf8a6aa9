"""The cyclic garbage collector, paused while a run makes millions of small objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """A ranking run (the engine's queue, the store's rows) allocates millions of small
    tuples and creates no reference cycles; the cyclic collector would otherwise walk the
    whole, growing heap again and again (a third of the run time at a million findings).

    Paused, the collector still counts what was made: its first pass after the pause walked
    every object the run kept (the queue a worker keeps for the next incremental run, ten
    million tuples: 4.5 s at ten million findings), and the older generations' passes walked
    them again later. So the outermost pause first collects what is garbage already, and on
    leaving freezes what is alive (`gc.freeze`): the collector ignores it from then on, and
    each object is still freed by its reference count when the next run drops it. What
    could stay is an object alive at the freeze that later becomes part of a garbage cycle;
    runs make none, and the next outermost pause's collection frees any made between runs.
    Restores the collector as it was."""
    enabled = gc.isenabled()
    if enabled:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()
