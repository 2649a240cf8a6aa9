"""ruff and mypy (with the django-stubs plugin) stay clean: STYLE.md's "types and lint from
day one", enforced where every change is tested."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.lint


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBUG="1")
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing():
    result = _run("mypy", "--cache-dir", str(ROOT / "var" / "mypy-cache"), "trustrank", "ingest")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
