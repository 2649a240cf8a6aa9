"""Shared fixtures: teams, users, API keys, and real worker / web server processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from trustrank.accounts.models import Role, Team
from trustrank.accounts.services import api_key_issue, membership_set

pytest_plugins = ["tests.fixtures_browser"]

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def team(db: None) -> Team:
    return Team.objects.create(name="payments")


@pytest.fixture
def other_team(db: None) -> Team:
    return Team.objects.create(name="intruders")


@pytest.fixture
def make_user(db: None) -> Callable[..., object]:
    from django.contrib.auth import get_user_model

    def make(username: str, *, team: Team | None = None, role: str = Role.ADMIN) -> object:
        user = get_user_model().objects.create_user(username=username, password="pw-" + username)
        if team is not None:
            membership_set(team=team, user=user, role=role)
        return user

    return make


@pytest.fixture
def make_key(db: None) -> Callable[..., str]:
    """make_key(team, "sbom:write", "read") -> the secret."""

    def make(team: Team, *scopes: str) -> str:
        # Tests may hold site-wide scopes (feeds:write), as an operator's key would.
        return api_key_issue(
            team=team, name="test", scopes=list(scopes) or ["read"], allow_site_scopes=True
        ).secret

    return make


@pytest.fixture
def api(make_key: Callable[..., str]) -> Callable[..., APIClient]:
    """api(team, *scopes) -> an APIClient that sends that team's key in X-Api-Key."""

    def make(team: Team, *scopes: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_X_API_KEY=make_key(team, *scopes))
        return client

    return make


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child process that must use the test database and test queues."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "trustrank.settings"
    env["TRUSTRANK_DB_NAME"] = str(settings.DATABASES["default"]["NAME"])
    env["TRUSTRANK_QUEUE_PREFIX"] = settings.QUEUE_PREFIX_FOR_TESTS
    env["TRUSTRANK_TESTING"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session", autouse=True)
def _isolated_queues() -> Iterator[None]:
    """Give this test run queue names of its own, so a stale message from another run (or a
    developer's demo on the same broker) never reaches our workers; drop them afterwards."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    settings.QUEUE_PREFIX_FOR_TESTS = prefix
    settings.INGEST_QUEUE = f"{prefix}ingest"
    settings.INGEST_HIGH_QUEUE = f"{prefix}ingest_high"
    settings.BATCH_QUEUE = f"{prefix}batch"
    yield
    _queues_drop(prefix)


@pytest.fixture(autouse=True)
def _fresh_overload_cache() -> Iterator[None]:
    """Each test sees the queue depth anew (receivers cache it for a second per process)."""
    from ingest.services import ingest_overload_cache_clear

    ingest_overload_cache_clear()
    yield
    ingest_overload_cache_clear()


@pytest.fixture(autouse=True)
def _fresh_api_key_cache() -> Iterator[None]:
    """Each test looks its keys up anew (the telemetry receivers trust a good key for a few
    seconds per process)."""
    from trustrank.accounts.services import api_key_cache_clear

    api_key_cache_clear()
    yield
    api_key_cache_clear()


def _queues_drop(prefix: str) -> None:
    """Remove this run's queues and any message left in them (tests that leave a job queued
    on purpose), from Redis or from the filesystem broker's folder."""
    url = settings.CELERY_BROKER_URL
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url)
        keys = [*client.scan_iter(f"{prefix}*"), *client.scan_iter(f"_kombu.binding*.{prefix}*")]
        if keys:
            client.delete(*keys)
    elif url.startswith("filesystem://"):
        folder = Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]))
        for message in folder.glob(f"*.{prefix}*.msg"):
            message.unlink(missing_ok=True)


def _stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the main process (a group-wide SIGTERM can hang Celery's warm shutdown), then
    SIGKILL whatever is left of its group so no child keeps a database connection open."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.fixture(scope="session", autouse=True)
def _no_stray_connections(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Before the test database is dropped, end the sessions that killed workers and servers
    may have left behind, so the drop never fails with 'being accessed by other users'."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


class WorkerProcess:
    """A real `celery worker` process on this run's queues and the test database."""

    def __init__(
        self,
        *,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
        queues: list[str] | None = None,
        beat: bool = False,
    ) -> None:
        self.log_path = log_path
        names = queues or [settings.INGEST_HIGH_QUEUE, settings.INGEST_QUEUE, settings.BATCH_QUEUE]
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "trustrank",
            "worker",
            "-Q",
            ",".join(names),
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
            "-n",
            f"test-{uuid.uuid4().hex[:6]}@%h",
        ]
        if beat:
            # Embedded beat (the sweep), with a schedule file of its own.
            command += ["-B", "-s", str(log_path.with_suffix(".beat"))]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=subprocess_env(**(extra_env or {})),
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_path.read_text()[-4000:]}")
            if "ready." in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready:\n{self.log_path.read_text()[-4000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        _stop_process_group(self.proc)


@pytest.fixture
def start_worker(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """start_worker(queues=None, beat=False, **env) -> a running worker, stopped after the test."""
    workers: list[WorkerProcess] = []

    def start(
        *, queues: list[str] | None = None, beat: bool = False, **extra_env: str
    ) -> WorkerProcess:
        worker = WorkerProcess(
            log_path=tmp_path / f"worker{len(workers)}.log",
            extra_env=extra_env,
            queues=queues,
            beat=beat,
        )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def celery_worker(start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    return start_worker()


class WebServer:
    """gunicorn serving trustrank.wsgi:application, as in production."""

    def __init__(self, *, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "trustrank.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                "2",
                "--timeout",
                "120",
            ],
            cwd=ROOT,
            env=subprocess_env(**(extra_env or {})),
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{log_path.read_text()[-4000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("gunicorn did not start")

    def stop(self) -> None:
        _stop_process_group(self.proc)


@pytest.fixture
def web_server(transactional_db: None, tmp_path: Path) -> Iterator[WebServer]:
    server = WebServer(log_path=tmp_path / "gunicorn.log")
    yield server
    server.stop()


def wait_for(
    predicate: Callable[[], object], *, timeout: float = 60, interval: float = 0.1
) -> object:
    """Poll until predicate() is truthy; return its value or fail with a timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
