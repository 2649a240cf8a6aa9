"""Signed checkpoints of the audit hash chains: anchoring against a rewrite that re-seals.

A chain proves that no event was changed without recomputing the digests after it. Someone
with write access to the table can recompute them all (re-seal), and the chain is then
consistent again. A checkpoint records, for every chain, its head event id, event count and
head digest, and signs that statement with an Ed25519 key the database does not hold. Later,
the checkpointed head event must still carry the digest signed here, with the same number of
events up to it, and the chain up to it must verify: a rewrite of anything at or before the
head changes the head's digest, which nobody can re-sign without the private key.

What a checkpoint cannot catch on its own: deleting the newest checkpoint rows. Keep the
printed line (or the row) somewhere else too (a ticket, a log shipped off the host).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from django.conf import settings
from django.utils import timezone

from trustrank.accounts.models import Team
from trustrank.findings.records import AuditCheckpoint
from trustrank.findings.services.audit_chain import audit_chain_verify

STATEMENT_TYPE = "trustrank-audit-checkpoint"
_KEY_HELP = "an Ed25519 private key: PEM (PKCS#8) or base64 of its 32 raw bytes"


class AuditKeyError(Exception):
    """The signing or verifying key is missing or unusable. The message names the setting,
    never the key."""


class AuditChainBrokenError(Exception):
    """A chain is broken now: a checkpoint would seal the damage."""


def _private_key_text() -> bytes:
    raw = settings.TRUSTRANK_AUDIT_SIGNING_KEY
    path = settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE
    if raw and path:
        raise AuditKeyError(
            "both TRUSTRANK_AUDIT_SIGNING_KEY and TRUSTRANK_AUDIT_SIGNING_KEY_FILE are set; "
            "set one"
        )
    if path:
        try:
            return Path(path).read_bytes().strip()
        except OSError as exc:
            raise AuditKeyError(
                f"TRUSTRANK_AUDIT_SIGNING_KEY_FILE={path!r} cannot be read "
                f"({exc.__class__.__name__}: {exc.strerror})"
            ) from None
    if not raw:
        raise AuditKeyError(
            "no audit signing key: set TRUSTRANK_AUDIT_SIGNING_KEY or "
            f"TRUSTRANK_AUDIT_SIGNING_KEY_FILE to {_KEY_HELP}"
        )
    return raw.strip().encode()


def _b64_32(text: bytes) -> bytes | None:
    try:
        raw = base64.b64decode(b"".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


def audit_signing_key() -> Ed25519PrivateKey:
    """The configured private key; AuditKeyError when none is set or it is not Ed25519."""
    text = _private_key_text()
    where = (
        "TRUSTRANK_AUDIT_SIGNING_KEY_FILE" if settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE
        else "TRUSTRANK_AUDIT_SIGNING_KEY"
    )
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            # The library's message can quote the input: say only what is wrong.
            raise AuditKeyError(f"{where} is not a readable PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise AuditKeyError(f"{where} is a {type(key).__name__}, not {_KEY_HELP}")
        return key
    raw = _b64_32(text)
    if raw is None:
        raise AuditKeyError(f"{where} is not {_KEY_HELP}")
    return Ed25519PrivateKey.from_private_bytes(raw)


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(key: Ed25519PublicKey) -> str:
    return "sha256:" + hashlib.sha256(_raw_public(key)).hexdigest()


def audit_verify_key() -> Ed25519PublicKey | None:
    """The public key checkpoints must carry a signature of: TRUSTRANK_AUDIT_VERIFY_KEY, else
    the signing key's public half, else None (nothing configured)."""
    text = settings.TRUSTRANK_AUDIT_VERIFY_KEY.strip().encode()
    if text:
        if text.startswith(b"-----BEGIN"):
            try:
                key = serialization.load_pem_public_key(text)
            except (ValueError, TypeError, UnsupportedAlgorithm):
                raise AuditKeyError(
                    "TRUSTRANK_AUDIT_VERIFY_KEY is not a readable PEM public key"
                ) from None
            if not isinstance(key, Ed25519PublicKey):
                raise AuditKeyError("TRUSTRANK_AUDIT_VERIFY_KEY is not an Ed25519 public key")
            return key
        raw = _b64_32(text)
        if raw is None:
            raise AuditKeyError(
                "TRUSTRANK_AUDIT_VERIFY_KEY is not an Ed25519 public key "
                "(PEM or base64 of its 32 raw bytes)"
            )
        return Ed25519PublicKey.from_public_bytes(raw)
    if settings.TRUSTRANK_AUDIT_SIGNING_KEY or settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE:
        return audit_signing_key().public_key()
    return None


def _canonical(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _chains() -> list[tuple[str, int | None]]:
    chains: list[tuple[str, int | None]] = [
        (f"team {name} (id {pk})", pk)
        for pk, name in Team.objects.order_by("pk").values_list("pk", "name")
    ]
    return [*chains, ("site-wide", None)]


def audit_checkpoint_create(*, created_by: str) -> AuditCheckpoint:
    """Verify every chain and sign where each stands now. Refuses (AuditChainBrokenError)
    when a chain is broken, and (AuditKeyError) without a usable key — checked first, before
    the chains are read."""
    key = audit_signing_key()
    now = timezone.now()
    entries = []
    for label, team_id in _chains():
        report = audit_chain_verify(team_id=team_id)
        if not report.intact:
            raise AuditChainBrokenError(
                f"{label} is broken at event {report.first_broken_id} ({report.reason}); "
                "a checkpoint would seal the damage"
            )
        entries.append(
            {
                "team": team_id,
                "head_event_id": report.head_event_id,
                "events": report.events,
                "head_digest": report.head_digest,
            }
        )
    statement = _canonical(
        {
            "type": STATEMENT_TYPE,
            "version": 1,
            "created_at": now.astimezone(UTC).isoformat(timespec="microseconds"),
            "created_by": created_by,
            "chains": entries,
        }
    )
    public = key.public_key()
    return AuditCheckpoint.objects.create(
        created_at=now,
        created_by=created_by[:160],
        statement=statement,
        signature=base64.b64encode(key.sign(statement.encode())).decode(),
        public_key=base64.b64encode(_raw_public(public)).decode(),
        key_fingerprint=key_fingerprint(public),
    )


def audit_checkpoint_latest() -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.order_by("-created_at", "-id").first()


@dataclass(frozen=True)
class CheckpointCheck:
    """One chain compared with a checkpoint. `ok` False names the problem and, where there is
    one, the event (`event_id`)."""

    checkpoint_id: int
    created_at: datetime
    ok: bool
    problem: str = ""
    event_id: int | None = None
    head_event_id: int | None = None
    events: int | None = None
    note: str = ""


def _signature_problem(checkpoint: AuditCheckpoint, key: Ed25519PublicKey | None) -> str:
    if key is None:
        try:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(checkpoint.public_key))
        except (binascii.Error, ValueError):
            return "its stored public key is not an Ed25519 key"
    elif key_fingerprint(key) != checkpoint.key_fingerprint:
        return (
            f"it was signed by key {checkpoint.key_fingerprint}, not by the configured key "
            f"{key_fingerprint(key)}"
        )
    try:
        key.verify(base64.b64decode(checkpoint.signature), checkpoint.statement.encode())
    except (InvalidSignature, binascii.Error, ValueError):
        return "its signature does not verify (the checkpoint was altered)"
    return ""


def audit_checkpoint_check(
    checkpoint: AuditCheckpoint, *, team_id: int | None, key: Ed25519PublicKey | None
) -> CheckpointCheck:
    """Compare one chain (a team's, or None: site-wide) with `checkpoint`: its signature
    (with `key`; None: the key stored beside it, which proves less), the checkpointed head
    event's digest, the number of events up to it and the chain up to it."""
    base: dict[str, Any] = {"checkpoint_id": checkpoint.pk, "created_at": checkpoint.created_at}
    note = "" if key is not None else (
        "signature checked with the key stored beside it; set TRUSTRANK_AUDIT_VERIFY_KEY "
        "to check it against yours"
    )
    problem = _signature_problem(checkpoint, key)
    if problem:
        return CheckpointCheck(**base, ok=False, problem=problem)
    doc = json.loads(checkpoint.statement)
    entry = next((c for c in doc.get("chains", []) if c.get("team") == team_id), None)
    if entry is None:
        return CheckpointCheck(**base, ok=True, note="the chain is newer than the checkpoint")
    head_id, events, digest = entry["head_event_id"], entry["events"], entry["head_digest"]
    facts: dict[str, Any] = {**base, "head_event_id": head_id, "events": events, "note": note}
    if head_id is None:
        return CheckpointCheck(**facts, ok=True)
    then = audit_chain_verify(team_id=team_id, upto_id=head_id)
    if then.head_event_id != head_id:
        return CheckpointCheck(
            **facts, ok=False, event_id=head_id,
            problem=f"event {head_id}, the chain's head then, is gone",
        )
    if then.head_digest != digest:
        return CheckpointCheck(
            **facts, ok=False, event_id=head_id,
            problem=(
                f"event {head_id} now has digest {then.head_digest}, the checkpoint signed "
                f"{digest} (history up to it was rewritten and re-sealed)"
            ),
        )
    if then.events != events:
        return CheckpointCheck(
            **facts, ok=False, event_id=head_id,
            problem=(
                f"{then.events} events up to event {head_id}, the checkpoint counted {events} "
                "(events were removed or inserted)"
            ),
        )
    if not then.intact:
        return CheckpointCheck(
            **facts, ok=False, event_id=then.first_broken_id,
            problem=f"the chain up to event {head_id} is broken: {then.reason}",
        )
    return CheckpointCheck(**facts, ok=True)


_LATEST: Any = object()


def audit_checkpoint_summary(
    *, team_id: int, checkpoint: AuditCheckpoint | None = _LATEST
) -> dict[str, Any] | None:
    """The latest checkpoint (or `checkpoint`, read once for many teams) as a report or page
    shows it for one team's chain: its id, time, key, the chain's checkpointed head and
    whether the chain still agrees; None without one."""
    if checkpoint is _LATEST:
        checkpoint = audit_checkpoint_latest()
    if checkpoint is None:
        return None
    try:
        key = audit_verify_key()
    except AuditKeyError as exc:
        return {"id": checkpoint.pk, "created_at": checkpoint.created_at, "ok": False,
                "problem": str(exc), "key_fingerprint": checkpoint.key_fingerprint}
    check = audit_checkpoint_check(checkpoint, team_id=team_id, key=key)
    return {
        "id": checkpoint.pk,
        "created_at": checkpoint.created_at,
        "key_fingerprint": checkpoint.key_fingerprint,
        "head_event_id": check.head_event_id,
        "events": check.events,
        "ok": check.ok,
        "problem": check.problem,
        "note": check.note,
    }
