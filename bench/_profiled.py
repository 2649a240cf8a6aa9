"""`profiled`: a call under cProfile, with the SQL statements it ran by time (the ranking
benches' --profile options)."""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any


def profiled(call: Callable[[], Any], profile: bool) -> Any:
    """`call()`, under cProfile when `profile`: its 45 costliest calls (cumulative time),
    then 30 by own time, then its 15 slowest SQL statements (each one's wall time on
    this connection, where a profile shows only psycopg's wait)."""
    if not profile:
        return call()
    from django.db import connection

    timed: list[tuple[float, str]] = []

    def timing(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            timed.append((time.perf_counter() - start, " ".join(sql.split())[:110]))

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with connection.execute_wrapper(timing):
            return call()
    finally:
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(30)
        print(f"{len(timed)} statements, {sum(t for t, _ in timed):.3f} s; the slowest:")
        for took, sql in sorted(timed, reverse=True)[:15]:
            print(f"  {took * 1000:7.1f} ms  {sql}")
