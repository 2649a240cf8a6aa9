"""A large team's rewritten queue in a table of its own: loaded bare, indexed after, swapped
in last before the run commits.

Ten million rows copied into a table with four indexes cost PostgreSQL 82 s; into a bare
table then indexed, 32 s (docs/ranking.md, "What the four indexes cost"). The ranked rows
are partitioned by team (`ranking.0013`): every team's rows live in the shared default
partition until a run rewrites a queue of `TRUSTRANK_RANKING_OWN_TABLE_ABOVE` rows or
more. Such a run copies its rows into a new table, builds the parent's indexes on it, and,
as the run's last statement before it commits (`TeamTable.swap`), makes it the team's:

- the team's own partition (`ranking_rankedfinding_t<team>`, created the first time, and
  itself partitioned by team) holds one child, its default partition: the old child is
  detached and dropped, the new one attached. The detach locks the team's partition
  (`ACCESS EXCLUSIVE`) until the commit: the team's own readers, and statements that name
  no team, wait those milliseconds; other teams' reads and writes, pruned at plan time to
  their partitions, do not;
- the first time, the team's rows leave the shared partition and its partition is created,
  which scans the shared partition and locks it until the commit: once per team.

Until the swap the run's own statements that read the team's rows (the search groups'
mend, the due dates) read `TeamTable.ranked`, the new table."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

PARENT = "ranking_rankedfinding"
SHARED = "ranking_rankedfinding_shared"

# The parent's indexes, made the same on the new table so that attaching it adopts them
# (an index that differs would be built again, under the lock).
_INDEXES = (
    "ALTER TABLE {t} ADD CONSTRAINT {t}_pkey PRIMARY KEY (finding_id, team_id)",
    "CREATE INDEX {t}_qkey ON {t} (team_id, qkey, finding_id)",
    "CREATE INDEX {t}_group ON {t} (team_id, search_group, qkey, finding_id)",
    "CREATE INDEX {t}_env ON {t} (team_id, environment, qkey, finding_id)",
)


def team_partition(team_id: int) -> str:
    """The name of a team's own partition of the ranked rows."""
    return f"{PARENT}_t{int(team_id)}"


@dataclass
class TeamTable:
    """Where one run's ranked rows of a team are written and read until the run commits:
    the parent (`new` is None), or a table of the run's own, swapped in by `swap`."""

    team_id: int
    run_id: int
    new: str | None = None

    @property
    def ranked(self) -> str:
        """The table the run's statements read the team's ranked rows from."""
        return self.new or PARENT

    def load_into(self, cur: Any, rows: int) -> str:
        """The table a rewrite of `rows` rows is copied into: a new bare one when the queue
        is large enough to be worth it, else the parent."""
        if rows < settings.TRUSTRANK_RANKING_OWN_TABLE_ABOVE:
            return PARENT
        # The run's id, and a suffix of its own: a database whose sequences were reset
        # (a test's) may still hold an earlier run's table of that id.
        self.new = f"{team_partition(self.team_id)}_r{int(self.run_id)}_{secrets.token_hex(3)}"
        cur.execute(
            f"CREATE TABLE {self.new} (LIKE {PARENT} INCLUDING DEFAULTS, "
            f"CONSTRAINT {self.new}_team CHECK (team_id = {int(self.team_id)}))")
        return self.new

    def index(self, cur: Any, meanwhile: Callable[[], bool] | None = None) -> None:
        """Build the new table's indexes, once its rows are in, and its statistics.
        `meanwhile`, a step of other work that says whether it did any, is called until it
        has none while PostgreSQL builds them (the statements then wait on a thread of
        their own; the caller's thread uses no connection meanwhile)."""
        if self.new is None:
            return
        cur.execute("SET LOCAL maintenance_work_mem = %s",
                    [f"{settings.TRUSTRANK_RANKING_INDEX_MEMORY_MB}MB"])
        statements = [s.format(t=self.new) for s in _INDEXES] + [f"ANALYZE {self.new}"]
        if meanwhile is None:
            for statement in statements:
                cur.execute(statement)
            return
        failed: list[BaseException] = []

        def build() -> None:
            try:
                for statement in statements:
                    cur.cursor.execute(statement)  # psycopg's: waits with the GIL released
            except BaseException as exc:  # raised below, in the caller's thread
                failed.append(exc)

        thread = threading.Thread(target=build, name="ranked-indexes", daemon=True)
        thread.start()
        try:
            while not failed and meanwhile():
                pass
        finally:
            thread.join()
        if failed:
            raise failed[0]

    def swap(self, cur: Any) -> None:
        """Make the new table the team's ranked rows; the last statement of the run before
        it commits (see the module's note on locks). Nothing when there is none."""
        if self.new is None:
            return
        part = team_partition(self.team_id)
        cur.execute("SET LOCAL lock_timeout = %s",
                    [f"{settings.TRUSTRANK_RANKING_SWAP_LOCK_SECONDS}s"])
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [part])
        if cur.fetchone()[0]:
            cur.execute(
                "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass",
                [part])
            for (old,) in cur.fetchall():
                cur.execute(f"ALTER TABLE {part} DETACH PARTITION {old}")
                cur.execute(f"DROP TABLE {old}")
        else:
            # Our own table's name; the team is a parameter.
            cur.execute(f"DELETE FROM {SHARED} WHERE team_id = %s",  # noqa: S608
                        [self.team_id])
            cur.execute(
                f"CREATE TABLE {part} PARTITION OF {PARENT} FOR VALUES IN "
                f"({int(self.team_id)}) PARTITION BY LIST (team_id)")
        cur.execute(f"ALTER TABLE {part} ATTACH PARTITION {self.new} DEFAULT")
        self.new = None
