"""`manage.py audit_checkpoint`: sign where every audit chain stands now and keep it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from trustrank.findings.services.audit_checkpoint import (
    AuditChainBrokenError,
    AuditKeyError,
    audit_checkpoint_create,
)


class Command(BaseCommand):
    help = (
        "Write a signed audit checkpoint: for every chain (each team's and the site-wide one) "
        "its head event id, event count and head digest, signed with the Ed25519 key of "
        "TRUSTRANK_AUDIT_SIGNING_KEY or TRUSTRANK_AUDIT_SIGNING_KEY_FILE, stored in the "
        "database and printed (keep the printed lines somewhere else too). audit_verify then "
        "detects a history rewritten and re-sealed since. Refuses when a chain is broken."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            checkpoint = audit_checkpoint_create(created_by="command:audit_checkpoint")
        except (AuditKeyError, AuditChainBrokenError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Audit checkpoint {checkpoint.pk} at {checkpoint.created_at.isoformat()} "
            f"signed by key {checkpoint.key_fingerprint}"
        )
        self.stdout.write(f"statement: {checkpoint.statement}")
        self.stdout.write(f"signature: {checkpoint.signature}")
