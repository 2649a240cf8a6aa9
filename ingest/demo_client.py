"""The demo loader's HTTP client: the running server's public API with the demo team's key,
and the loader's messages (`say`), which go where the command writes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

JOB_TIMEOUT_SECONDS = 120

# Set by the command so the loader's messages go where the command writes.
_write: Callable[[str], None] = print


def messages_to(write: Callable[[str], None]) -> None:
    """Send the loader's messages (`say`) to `write` instead of standard output."""
    global _write
    _write = write


def say(message: str) -> None:
    _write(f"[demo_load] {message}")


class Api:
    """Minimal HTTP client for the running server (standard library only)."""

    def __init__(self, *, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key

    def call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "",
        headers: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> tuple[int, dict[str, Any] | None, str]:
        request = urllib.request.Request(  # noqa: S310 (the demo server, http://)
            self.base_url + path, data=body, method=method,
            headers={"X-Api-Key": self.key, "Accept": "application/json"},
        )
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        text = raw.decode("utf-8", "replace")
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        return status, data if isinstance(data, dict) else None, text

    def job_wait(self, status_url: str) -> dict[str, Any]:
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            status, job, text = self.call("GET", status_url)
            if status != 200 or job is None:
                error = f"GET {status_url} answered {status}: {text[:300]}"
                return {"status": "failed", "error": error}
            if job.get("status") in ("done", "failed"):
                return job
            time.sleep(0.5)
        return {"status": "timeout", "error": f"still not finished after {JOB_TIMEOUT_SECONDS} s"}


def problem_text(status: int, data: dict[str, Any] | None, text: str) -> str:
    if data is not None:
        return str(data.get("detail") or data.get("title") or data)[:300]
    return f"HTTP {status}: {text[:300]}"


def job_summary(job: dict[str, Any]) -> str:
    if job.get("status") == "done":
        counts = job.get("counts") or {}
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if not str(k).startswith("_"))
        return f"done ({shown})" if shown else "done"
    return f"FAILED: {job.get('error') or 'no message'}"
