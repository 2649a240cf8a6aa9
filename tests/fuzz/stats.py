"""Counts the fuzzing suites print at the end of the run (tests/fuzz/conftest.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

SCHEMATHESIS: dict[str, Any] = {"requests": 0, "operations": set(), "seconds": 0.0}
# parser name -> [examples, wall seconds of its test]
HYPOTHESIS: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
