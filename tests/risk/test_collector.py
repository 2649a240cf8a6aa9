"""The collector pause around a ranking run: what the run made is not walked again by the
cyclic collector after it, and garbage made before it is freed, not frozen."""

from __future__ import annotations

import gc
import weakref

from trustrank.risk import collector
from trustrank.risk.collector import collector_paused


class _Node:
    def __init__(self) -> None:
        self.me = self


class _Leaf:
    pass


def _tracked_anywhere(obj: object) -> bool:
    """Whether any of the collector's generations (not its frozen objects) holds obj."""
    return any(o is obj for o in gc.get_objects())


def test_what_a_run_keeps_is_not_walked_again() -> None:
    with collector_paused():
        kept = [(n, str(n), (n,)) for n in range(1000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 100  # the pause's objects are not the next pass's work
    assert not _tracked_anywhere(kept)
    assert not _tracked_anywhere(kept[500])



def test_a_frozen_object_is_still_freed_when_dropped() -> None:
    with collector_paused():
        leaf = _Leaf()
    gone = weakref.ref(leaf)
    del leaf
    assert gone() is None


def test_garbage_made_before_the_run_is_freed_not_frozen() -> None:
    node = _Node()
    gone = weakref.ref(node)
    del node  # a cycle: only the collector frees it
    with collector_paused():
        pass
    assert gone() is None


def test_a_nested_pause_leaves_the_collector_paused() -> None:
    with collector_paused():
        with collector_paused():
            inner = [(n,) for n in range(10)]
        assert not gc.isenabled()
        assert _tracked_anywhere(inner)  # frozen only when the outermost pause ends
    assert gc.isenabled()
    assert not _tracked_anywhere(inner)


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            made = [(n,) for n in range(10)]
        assert not gc.isenabled()
        assert _tracked_anywhere(made)
    finally:
        gc.enable()


def test_a_cycle_frozen_alive_is_freed_by_the_hourly_full_collection(monkeypatch) -> None:
    node = _Node()
    with collector_paused():
        pass  # node, alive, is frozen
    gone = weakref.ref(node)
    del node  # garbage now, but frozen: no collection sees it
    with collector_paused():
        pass
    assert gone() is not None
    monkeypatch.setattr(collector, "FULL_COLLECTION_SECONDS", 0.0)
    with collector_paused():
        pass
    assert gone() is None
