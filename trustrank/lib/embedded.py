"""Embedded defaults: a private PostgreSQL (pgserver) and a broker that needs no server.

Used only when DATABASE_URL / CELERY_BROKER_URL are unset, so one command gives a working
demo on a machine that has nothing but Python.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

# Consumed messages kept longer than this are pruned (see filesystem_broker).
_PROCESSED_KEEP_SECONDS = 3600


def embedded_database_url(var_dir: Path) -> str:
    # Imported lazily: production never pays for it. platformdirs warns on every start
    # when XDG_RUNTIME_DIR is unset (it then uses /tmp), which is fine for its lock file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    var_dir.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the web server and the worker are separate processes sharing one
    # server; the first one to exit must not stop it under the other.
    server = pgserver.get_server(var_dir / "pgdata", cleanup_mode=None)
    return server.get_uri()


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
