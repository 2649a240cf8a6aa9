"""A value kept in the shared cache and computed by one process at a time.

What the findings list keeps (totals, order heads, a search's sorted matches) is keyed by the
teams' findings generation, so every write makes every key new at once: without a guard, each
web worker's next request computes the same missing value (a COUNT of ten million findings,
2.6 s) side by side. Here the first request to miss claims the key (`cache.add` of a claim key:
no database round trip) and computes; the others poll the cache for its result for a while,
then answer with their `fallback` (an estimate) or compute it themselves.

The claim is as atomic as the cache's `add`: Redis's and the per-process cache's are; the file
cache's is a check then a write, so two processes arriving within the same fraction of a
millisecond may both compute, which costs what every miss cost before, never a wrong value. A
claim whose holder died expires after CLAIM_SECONDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache

# A claim outlives any computation it guards; it only matters if its holder dies mid-way.
CLAIM_SECONDS = 120
# How often a waiting request looks for the value another one is computing: soon at first
# (most values take milliseconds), then less often (each look reads the cache).
POLL_FIRST_SECONDS = 0.01
POLL_MAX_SECONDS = 0.1


def cache_get_or_compute_once(
    key: str, compute: Callable[[], Any], *, timeout: float, wait: float,
    fallback: Callable[[], Any] | None = None,
) -> Any:
    """The cached value of `key`; on a miss, `compute()` kept for `timeout` seconds, unless
    another process is computing it: then its value once it appears (within `wait` seconds),
    else `fallback()` (not kept), or `compute()` when there is no fallback. None is not a
    value (it means a miss)."""
    if timeout <= 0:  # nothing is kept, so there is nothing to wait for
        return compute()
    found = cache.get(key)
    if found is not None:
        return found
    claim = f"{key}:claim"
    if cache.add(claim, 1, timeout=CLAIM_SECONDS):
        try:
            # Computed and released between our miss and our claim: no need to do it again.
            found = cache.get(key)
            if found is None:
                found = compute()
                cache.set(key, found, timeout=timeout)
            return found
        finally:
            cache.delete(claim)
    deadline = time.monotonic() + wait
    pause = POLL_FIRST_SECONDS
    while time.monotonic() < deadline:
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, POLL_MAX_SECONDS)
        found = cache.get(key)
        if found is not None:
            return found
    return fallback() if fallback is not None else compute()
