from __future__ import annotations

from typing import Any

from tests.fuzz import stats


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per suite with what ran and how long it took (CI logs keep it)."""
    s = stats.SCHEMATHESIS
    if s["requests"]:
        terminalreporter.write_line(
            f"schemathesis: {s['requests']} requests over {len(s['operations'])} operations, "
            f"{s['seconds']:.1f} s in requests"
        )
    if stats.HYPOTHESIS:
        total = sum(int(v[0]) for v in stats.HYPOTHESIS.values())
        seconds = sum(v[1] for v in stats.HYPOTHESIS.values())
        parts = ", ".join(
            f"{name} {int(v[0])}" for name, v in sorted(stats.HYPOTHESIS.items())
        )
        terminalreporter.write_line(
            f"hypothesis: {total} parser examples in {seconds:.1f} s wall time ({parts})"
        )
