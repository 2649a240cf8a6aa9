from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.accounts.models import SITE_SCOPES, Scope
from trustrank.accounts.services import InvalidScope, api_key_issue, team_get_or_create


class Command(BaseCommand):
    help = (
        "Create a team API key and print it alone on the last line (creates the team if missing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team name")
        parser.add_argument(
            "--scope",
            action="append",
            required=True,
            choices=[*Scope.values, *sorted(SITE_SCOPES)],
            help="a scope; repeat for several. feeds:write (site-wide: imports the advisory "
            "feeds every team shares) can only be granted here",
        )
        parser.add_argument("--name", default="automation", help="a label for the key")

    def handle(self, *args: Any, **options: Any) -> None:
        team = team_get_or_create(name=options["team"])
        try:
            issued = api_key_issue(
                team=team, name=options["name"], scopes=options["scope"], allow_site_scopes=True
            )
        except InvalidScope as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"Key {issued.api_key.name!r} for team {team.name!r} with scopes "
            f"{', '.join(issued.api_key.scopes)}. It is shown once; store it now."
        )
        self.stdout.write(issued.secret)
