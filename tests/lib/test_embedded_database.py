"""With no DATABASE_URL every process uses the embedded PostgreSQL under TRUSTRANK_VAR_DIR,
never the machine's own server (which libpq reaches by its default socket or PGHOST)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pgserver = pytest.importorskip("pgserver", reason="the embedded PostgreSQL (pgserver) is absent")

pytestmark = pytest.mark.e2e  # real processes

def _query(sql: str) -> str:
    """Python that prints the first column of `sql`'s first row (or its status) after
    `ANSWER=`."""
    return (
        "from django.db import connection\n"
        "with connection.cursor() as cursor:\n"
        f"    cursor.execute({sql!r})\n"
        "    answer = cursor.fetchone()[0] if cursor.description else 'done'\n"
        "    print(f'ANSWER={answer}')\n"
    )


def _machine_postgres_listens() -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", 5432)) == 0


def _env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "TRUSTRANK_TESTING", "TRUSTRANK_DB_NAME")}
    env.update(
        DJANGO_SETTINGS_MODULE="trustrank.settings",
        SECRET_KEY="s" * 50,
        TRUSTRANK_VAR_DIR=str(var_dir),
        # What a shell on a machine with its own PostgreSQL often has: neither may lead the
        # embedded settings to that server.
        PGHOST="127.0.0.1",
        PGPORT="5432",
    )
    return env


def _answer(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("ANSWER="))
    return line.removeprefix("ANSWER=")


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", "import django; django.setup()\n" + code]


@pytest.mark.parametrize("how", ["manage.py", "django.setup"])
def test_without_database_url_a_process_uses_the_embedded_server_under_the_var_dir(
    tmp_path, how
):
    if not _machine_postgres_listens():
        # Still a valid test, only a weaker one: nothing else to connect to by mistake.
        print("note: no PostgreSQL on 127.0.0.1:5432 while this ran")
    var_dir = tmp_path / "var"
    show = _query("SHOW data_directory")
    if how == "manage.py":
        argv = [sys.executable, "manage.py", "shell", "-c", show]
    else:
        argv = _python(show)
    data_directory = Path(_answer(argv, _env(var_dir))).resolve()
    assert data_directory == (var_dir / "pgdata").resolve()
    # And the server stopped with the process that started it.
    assert not (var_dir / "pgdata" / "postmaster.pid").exists()


def test_deleting_the_var_dir_starts_from_an_empty_database(tmp_path):
    var_dir = tmp_path / "var"
    env = _env(var_dir)
    assert _answer(_python(_query("CREATE TABLE left_behind (id int)")), env) == "done"
    exists = _query("SELECT count(*) FROM pg_tables WHERE tablename = 'left_behind'")
    assert _answer(_python(exists), env) == "1"
    shutil.rmtree(var_dir)
    assert _answer(_python(exists), env) == "0"


def test_every_migration_runs_on_the_embedded_server(tmp_path):
    """The embedded server has no contrib modules such as pg_trgm, and `dev.py demo`
    migrates it: an index that needs one must be made only where the server has it
    (findings.0007, findings.0016). The search groups' triggers are there either way."""
    env = _env(tmp_path / "var")
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    triggers = _query("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'findings_search_groups%'")
    assert _answer(_python(triggers), env) == "2"
