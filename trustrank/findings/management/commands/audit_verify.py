"""`manage.py audit_verify [--team T]`: check the audit hash chains; exit 1 if any is broken."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.accounts.models import Team
from trustrank.findings.services.audit_chain import ChainReport, audit_chain_verify
from trustrank.lib.numbers import int_or_none


class Command(BaseCommand):
    help = (
        "Verify the audit events' hash chains: one team's (--team, a name or an id) or every "
        "team's and the site-wide chain. Prints each chain as intact or broken with its first "
        "broken event; exits with status 1 when any chain is broken."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="", help="team name or id (default: every chain)")

    def handle(self, *args: Any, **options: Any) -> None:
        chains: list[tuple[str, int | None]]
        hint = str(options["team"] or "").strip()
        if hint:
            team = Team.objects.filter(name=hint).first()
            team_id = int_or_none(hint, minimum=1)
            if team is None and team_id is not None:
                team = Team.objects.filter(pk=team_id).first()
            if team is None:
                raise CommandError(f"no team {hint!r} (give a team name or id)")
            chains = [(f"team {team.name} (id {team.pk})", team.pk)]
        else:
            chains = [(f"team {t.name} (id {t.pk})", t.pk) for t in Team.objects.order_by("pk")]
            chains.append(("site-wide", None))
        broken = 0
        for label, team_id in chains:
            report = audit_chain_verify(team_id=team_id)
            self.stdout.write(_line(label, report))
            broken += not report.intact
        if broken:
            raise CommandError(f"{broken} audit chain(s) broken", returncode=1)
        self.stdout.write(f"All {len(chains)} audit chain(s) intact.")


def _line(label: str, report: ChainReport) -> str:
    if report.intact:
        return f"{label}: intact, {report.events} events, head {report.head_digest or '-'}"
    return (
        f"{label}: BROKEN at event {report.first_broken_id}: {report.reason} "
        f"({report.events} events, head {report.head_digest or '-'})"
    )
