"""A job handler that takes its time, for the lease tests (referenced by dotted path)."""

from __future__ import annotations

import threading
import time
from typing import Any

RUNS: list[str] = []
STARTED = threading.Event()
SECONDS = 3.0


def slow_job(*, job: Any, payload: bytes, progress: Any) -> dict[str, Any]:
    RUNS.append(str(job.pk))
    STARTED.set()
    steps = 10
    for step in range(steps):
        progress(phase="working", done=step, total=steps)
        time.sleep(SECONDS / steps)
    return {"steps": steps}
