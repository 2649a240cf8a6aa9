"""Embedded defaults: a private PostgreSQL (pgserver) and a broker that needs no server.

Used only when DATABASE_URL / CELERY_BROKER_URL are unset, so one command gives a working
demo on a machine that has nothing but Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

# Consumed messages kept longer than this are pruned (see filesystem_broker).
_PROCESSED_KEEP_SECONDS = 3600


def embedded_database_settings(var_dir: Path, *, conn_max_age: int) -> dict[str, Any]:
    """DATABASES["default"] for the embedded PostgreSQL. Nothing starts here: the server is
    started by the first connection (trustrank.lib.embedded_pg), so commands that never touch
    the database (`collectstatic`, `check`, `--help`) leave no server behind."""
    return {
        "ENGINE": "trustrank.lib.embedded_pg",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "CONN_MAX_AGE": conn_max_age,
        "PGDATA": str(var_dir / "pgdata"),
    }


def embedded_server_start(pgdata: Path) -> dict[str, str]:
    """Start (or attach to) the embedded server and return where it listens, as Django's
    HOST / PORT / USER / PASSWORD settings.

    HOST is the server's socket folder, never empty: libpq reads an empty host as "the
    system's default socket", which is the machine's own PostgreSQL when one runs there
    (pgserver's URI carries the folder in a `?host=` query that Django's settings drop).

    Every process that connects registers its pid with pgserver, and the last one to exit
    stops the server ('stop' mode): the web server and the worker share one server, and a
    one-off `manage.py migrate` no longer leaves a server running that nothing will stop.
    """
    # Imported lazily: production never pays for it. platformdirs warns on every start
    # when XDG_RUNTIME_DIR is unset (it then uses /tmp), which is fine for its lock file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    info = server.get_postmaster_info()
    host = str(info.socket_dir or info.hostname or "")
    if not host:
        raise RuntimeError(f"the embedded PostgreSQL in {pgdata} reports no socket or address")
    return {
        "HOST": host,
        "PORT": str(info.port or ""),
        "USER": "postgres",
        "PASSWORD": "",
    }


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop pids of processes that died without cleaning up (killed): while listed, the
    last live process would never stop the server."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        with contextlib.suppress(OSError):
            handles.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def filesystem_broker(var_dir: Path) -> tuple[str, dict[str, object]]:
    folder = var_dir / "broker"
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    # A worker claims a message by renaming it into processed/: a rename on one filesystem is
    # atomic, so two workers never both take it (without store_processed kombu moves it to
    # the system temp dir, which may be another filesystem: copy + unlink, not atomic).
    # Consumed files are pruned here instead.
    cutoff = time.time() - _PROCESSED_KEEP_SECONDS
    for old in (folder / "processed").iterdir():
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass  # another process pruned it first
    options: dict[str, object] = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "store_processed": True,
        # Exchange tables (the worker's remote-control fanout); the default is a relative
        # "control" folder, i.e. wherever the process happens to start.
        "control_folder": str(folder / "control"),
        # Seconds between polls of the folder; kombu's default of 1 s delays every job.
        "polling_interval": 0.1,
    }
    return "filesystem://", options
