"""Django's PostgreSQL backend, with the embedded server started on the first connection.

Starting it in settings made every command start it, even `collectstatic` or `--help`,
and leave it running after it exited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url
from django.db.backends.postgresql import base as postgresql

from trustrank.lib.embedded import embedded_server_start


class DatabaseWrapper(postgresql.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        parsed = dj_database_url.parse(embedded_server_start(Path(self.settings_dict["PGDATA"])))
        # Where the server listens; the database NAME stays the configured one (tests and
        # TRUSTRANK_DB_NAME change it).
        for key in ("HOST", "PORT", "USER", "PASSWORD"):
            self.settings_dict[key] = parsed.get(key) or ""
        return super().get_connection_params()
