"""`manage.py audit_verify [--team T]`: check the audit hash chains, and each against the last
signed checkpoint (audit_checkpoint); exit 1 if any is broken or disagrees with it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trustrank.accounts.models import Team
from trustrank.findings.services.audit_chain import ChainReport, audit_chain_verify
from trustrank.findings.services.audit_checkpoint import (
    AuditKeyError,
    CheckpointCheck,
    audit_checkpoint_check,
    audit_checkpoint_latest,
    audit_verify_key,
)
from trustrank.lib.numbers import int_or_none


class Command(BaseCommand):
    help = (
        "Verify the audit events' hash chains: one team's (--team, a name or an id) or every "
        "team's and the site-wide chain. Prints each chain as intact or broken with its first "
        "broken event, and compares each with the last signed checkpoint (audit_checkpoint): "
        "its signature, the checkpointed head event's digest and the chain up to it. Exits "
        "with status 1 when any chain is broken or disagrees with the checkpoint."
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
        checkpoint = audit_checkpoint_latest()
        try:
            key = audit_verify_key() if checkpoint is not None else None
        except AuditKeyError as exc:
            raise CommandError(str(exc)) from None
        broken = disagree = 0
        for label, team_id in chains:
            report = audit_chain_verify(team_id=team_id)
            self.stdout.write(_line(label, report))
            broken += not report.intact
            if checkpoint is not None:
                check = audit_checkpoint_check(checkpoint, team_id=team_id, key=key)
                self.stdout.write(_checkpoint_line(check))
                disagree += not check.ok
        if checkpoint is None:
            self.stdout.write("No audit checkpoint yet (manage.py audit_checkpoint signs one).")
        if broken or disagree:
            raise CommandError(
                f"{broken} audit chain(s) broken, {disagree} disagree with checkpoint "
                f"{checkpoint.pk if checkpoint else '-'}",
                returncode=1,
            )
        agree = f", and agree with checkpoint {checkpoint.pk}" if checkpoint else ""
        self.stdout.write(f"All {len(chains)} audit chain(s) intact{agree}.")


def _line(label: str, report: ChainReport) -> str:
    if report.intact:
        return f"{label}: intact, {report.events} events, head {report.head_digest or '-'}"
    return (
        f"{label}: BROKEN at event {report.first_broken_id}: {report.reason} "
        f"({report.events} events, head {report.head_digest or '-'})"
    )


def _checkpoint_line(check: CheckpointCheck) -> str:
    when = check.created_at.isoformat()
    if not check.ok:
        event = f" at event {check.event_id}" if check.event_id is not None else ""
        return f"  checkpoint {check.checkpoint_id} ({when}): DISAGREES{event}: {check.problem}"
    seen = (
        f"head event {check.head_event_id}, {check.events} events"
        if check.head_event_id is not None else "no events then"
    )
    note = f" ({check.note})" if check.note else ""
    return f"  checkpoint {check.checkpoint_id} ({when}): agrees ({seen}){note}"
