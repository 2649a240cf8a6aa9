"""Start-up: without collected static files the web server refuses to start and says what
to run (instead of answering 500 on every page); commands that need no database never start
the embedded PostgreSQL, and one that does leaves none running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e  # real processes


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DEBUG", "TRUSTRANK_TESTING", "TRUSTRANK_DB_NAME")}
    env.update(
        DJANGO_SETTINGS_MODULE="trustrank.settings",
        SECRET_KEY="s" * 50,
        TRUSTRANK_VAR_DIR=str(tmp_path / "var"),
        TRUSTRANK_STATIC_ROOT=str(tmp_path / "static"),
        DATABASE_URL=os.environ.get("DATABASE_URL", ""),
    )
    env.update(extra)
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_without_collectstatic_the_web_server_refuses_to_start_and_says_what_to_run(tmp_path):
    result = _python("import trustrank.wsgi", _env(tmp_path))
    assert result.returncode != 0
    assert "collectstatic" in result.stderr


def test_after_collectstatic_pages_are_served_with_debug_off(tmp_path):
    env = _env(tmp_path)
    collect = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    assert collect.returncode == 0, collect.stderr[-2000:]
    code = (
        "import trustrank.wsgi\n"
        "from django.test import Client\n"
        "r = Client().get('/login/', secure=True)\n"
        "print(r.status_code)\n"
        "assert b'/static/css/app.' in r.content, r.content[:500]\n"
    )
    result = _python(code, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("200")


def _no_embedded_env(tmp_path: Path) -> dict[str, str]:
    env = _env(tmp_path)
    env.pop("DATABASE_URL")
    return env


@pytest.mark.parametrize(
    "command",
    [["check"], ["--help"], ["collectstatic", "--noinput"], ["help", "migrate"]],
)
def test_commands_that_need_no_database_never_start_the_embedded_one(tmp_path, command):
    env = _no_embedded_env(tmp_path)
    result = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (tmp_path / "var" / "pgdata").exists()


def test_a_command_that_uses_the_embedded_database_leaves_no_server_running(tmp_path):
    env = _no_embedded_env(tmp_path)
    result = subprocess.run([sys.executable, "manage.py", "showmigrations", "accounts"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0001_initial" in result.stdout
    pgdata = tmp_path / "var" / "pgdata"
    assert (pgdata / "PG_VERSION").exists()  # it did run
    assert not (pgdata / "postmaster.pid").exists()  # and it was stopped
