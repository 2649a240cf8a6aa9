"""Django's PostgreSQL backend, with the embedded server started on the first connection.

Starting it in settings made every command start it, even `collectstatic` or `--help`,
and leave it running after it exited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.backends.postgresql import base as postgresql

from trustrank.lib.embedded import embedded_server_start


class DatabaseWrapper(postgresql.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        # Where the server listens (its socket folder: an explicit host, so neither libpq's
        # default socket nor PGHOST can lead to another server); the database NAME stays the
        # configured one (tests and TRUSTRANK_DB_NAME change it).
        self.settings_dict.update(embedded_server_start(Path(self.settings_dict["PGDATA"])))
        return super().get_connection_params()
