"""`dev.py demo` keeps its children running: one that dies is started again (and said so),
one that keeps dying stops the demo with its log."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

import dev


def _child(tmp_path, code: str) -> dev.Child:
    return dev.Child(name="celery worker", argv=[sys.executable, "-c", code], env=dict(os.environ),
                     log=tmp_path / "worker.log")


def _wait_dead(child: dev.Child) -> None:
    deadline = time.monotonic() + 10
    while child.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not child.alive()


def _wait_log(child: dev.Child, text: str, times: int) -> None:
    deadline = time.monotonic() + 30
    while child.log_tail().count(text) < times and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.log_tail().count(text) == times


def test_a_worker_that_died_is_restarted_and_the_restart_is_said(tmp_path, capsys):
    child = _child(tmp_path, "import time; print('up', flush=True); time.sleep(60)")
    try:
        _wait_log(child, "up", 1)
        first = child.proc.pid
        os.kill(first, signal.SIGKILL)
        _wait_dead(child)
        dev.children_supervise([child])
        assert child.alive()
        assert child.proc.pid != first
        said = capsys.readouterr().out
        assert "celery worker stopped unexpectedly (exit code -9); restarting it" in said
        # The new one runs, and writes to the same log.
        _wait_log(child, "up", 2)
    finally:
        child.stop()


def test_a_living_child_is_left_alone(tmp_path):
    child = _child(tmp_path, "import time; time.sleep(60)")
    try:
        pid = child.proc.pid
        dev.children_supervise([child])
        assert child.proc.pid == pid
    finally:
        child.stop()


def test_a_worker_that_keeps_dying_stops_the_demo_with_its_log(tmp_path):
    child = _child(tmp_path, "import sys; print('broken settings'); sys.exit(3)")
    try:
        with pytest.raises(RuntimeError) as raised:
            for _ in range(dev.CRASH_LOOP_RESTARTS + 2):
                _wait_dead(child)
                dev.children_supervise([child])
        assert "exit code 3" in str(raised.value)
        assert "broken settings" in str(raised.value)
        assert len(child.starts) == dev.CRASH_LOOP_RESTARTS + 1
    finally:
        child.stop()


def test_the_demos_links_point_at_its_own_port(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "x" * 50)
    monkeypatch.delenv("TRUSTRANK_SITE_URL", raising=False)
    monkeypatch.setenv("PORT", "8731")
    assert dev.demo_env()["TRUSTRANK_SITE_URL"] == "http://127.0.0.1:8731"
    monkeypatch.delenv("PORT")
    assert dev.demo_env()["TRUSTRANK_SITE_URL"] == "http://127.0.0.1:8000"
    monkeypatch.setenv("TRUSTRANK_SITE_URL", "https://trustrank.example")
    assert dev.demo_env()["TRUSTRANK_SITE_URL"] == "https://trustrank.example"
