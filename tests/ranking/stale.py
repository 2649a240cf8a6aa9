"""Stored ranks made stale on purpose: a ranking run writes only the rows whose own key
changed, so the `rank` and `env_rank` columns of a ranked row are its ranks as of the run
that last wrote it. A reader that still reads them shows these wrong, reversed values
instead of the ranks counted from the key (trustrank/ranking/ranks.py)."""

from __future__ import annotations

from django.db import connection

STALE = 1_000_000


def stale_stored_ranks(team_id: int | None = None) -> None:
    """Reverse and offset the stored `rank` and `env_rank` of every ranked row (of one team),
    leaving keys and bucket counts as the run left them."""
    where = "" if team_id is None else " WHERE team_id = %s"
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE ranking_rankedfinding SET rank = {STALE} - rank,"
            f" env_rank = {STALE} - env_rank{where}",
            [] if team_id is None else [team_id],
        )
