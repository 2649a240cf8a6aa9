"""Signed audit checkpoints: a history rewritten and re-sealed (internally consistent again)
is caught against the last checkpoint; so are a tampered checkpoint and the wrong key."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from tests.findings.test_audit_chain import record, tamper
from trustrank.findings.records import AuditCheckpoint, AuditEvent
from trustrank.findings.services.audit import audit_event_digest
from trustrank.findings.services.audit_chain import audit_chain_verify
from trustrank.findings.services.audit_checkpoint import audit_checkpoint_summary

pytestmark = pytest.mark.django_db


def raw_b64(key: Ed25519PrivateKey) -> str:
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return base64.b64encode(raw).decode()


@pytest.fixture
def key(settings):
    private = Ed25519PrivateKey.generate()
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = raw_b64(private)
    settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE = ""
    settings.TRUSTRANK_AUDIT_VERIFY_KEY = ""
    return private


def verify(capsys) -> str:
    call_command("audit_verify")
    return capsys.readouterr().out


def verify_fails(capsys) -> str:
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify")
    assert failed.value.returncode == 1
    return capsys.readouterr().out


def reseal(team_id: int, from_id: int, **changes) -> None:
    """Rewrite event `from_id` as a superuser would, then recompute every digest after it
    with the project's own digest function, so the chain verifies again."""
    events = list(AuditEvent.objects.filter(team_id=team_id, id__gte=from_id).order_by("id"))
    prev = (
        AuditEvent.objects.filter(team_id=team_id, id__lt=from_id).order_by("-id")
        .values_list("digest", flat=True).first() or ""
    )
    for event in events:
        if event.pk == from_id:
            for name, value in changes.items():
                setattr(event, name, value)
        event.prev_digest = prev
        event.digest = audit_event_digest(event)
        tamper(
            "UPDATE findings_auditevent SET reason = %s, actor_label = %s, prev_digest = %s, "
            "digest = %s WHERE id = %s",
            [event.reason, event.actor_label, event.prev_digest, event.digest, event.pk],
        )
        prev = event.digest


def test_checkpoint_then_verify_agrees(team, other_team, key, capsys):
    events = [record(team.pk, reason=f"r{i}") for i in range(3)]
    record(None, action="feed_imported")
    call_command("audit_checkpoint")
    out = capsys.readouterr().out
    checkpoint = AuditCheckpoint.objects.get()
    assert f"Audit checkpoint {checkpoint.pk}" in out and checkpoint.signature in out
    assert checkpoint.key_fingerprint.startswith("sha256:") and checkpoint.key_fingerprint in out
    assert raw_b64(key) not in out
    assert f'"head_event_id":{events[-1].pk}' in checkpoint.statement
    # Events after the checkpoint are fine: it vouches for the history up to its heads.
    record(team.pk, reason="later")
    out = verify(capsys)
    assert f"checkpoint {checkpoint.pk}" in out and "DISAGREES" not in out
    assert f"agrees (head event {events[-1].pk}, 3 events)" in out
    assert f"agree with checkpoint {checkpoint.pk}" in out


def test_rewritten_and_resealed_history_is_caught(team, key, capsys):
    events = [record(team.pk, reason=f"r{i}") for i in range(5)]
    call_command("audit_checkpoint")
    checkpoint = AuditCheckpoint.objects.get()
    reseal(team.pk, events[1].pk, reason="nothing happened")
    # The chain alone cannot tell: it was re-sealed.
    assert audit_chain_verify(team_id=team.pk).intact
    out = verify_fails(capsys)
    assert f"checkpoint {checkpoint.pk}" in out
    assert f"DISAGREES at event {events[-1].pk}" in out and "re-sealed" in out
    summary = audit_checkpoint_summary(team_id=team.pk)
    assert summary is not None and not summary["ok"] and summary["id"] == checkpoint.pk


def test_removed_and_resealed_events_are_caught(team, key, capsys):
    events = [record(team.pk, reason=f"r{i}") for i in range(4)]
    call_command("audit_checkpoint")
    tamper("DELETE FROM findings_auditevent WHERE id = %s", [events[1].pk])
    reseal(team.pk, events[2].pk)
    assert audit_chain_verify(team_id=team.pk).intact
    assert f"DISAGREES at event {events[-1].pk}" in verify_fails(capsys)


def test_a_tampered_checkpoint_is_caught(team, key, capsys):
    record(team.pk)
    call_command("audit_checkpoint")
    checkpoint = AuditCheckpoint.objects.get()
    with connection.cursor() as cur:
        # Make the checkpoint vouch for another head digest.
        cur.execute(
            "UPDATE findings_auditcheckpoint SET statement = replace(statement, %s, %s)",
            ['"head_digest":"', '"head_digest":"0'],
        )
    out = verify_fails(capsys)
    assert f"checkpoint {checkpoint.pk}" in out and "signature does not verify" in out
    AuditCheckpoint.objects.filter(pk=checkpoint.pk).update(statement=checkpoint.statement)
    verify(capsys)
    flipped = base64.b64decode(checkpoint.signature)
    flipped = bytes([flipped[0] ^ 1]) + flipped[1:]
    AuditCheckpoint.objects.filter(pk=checkpoint.pk).update(
        signature=base64.b64encode(flipped).decode()
    )
    assert "signature does not verify" in verify_fails(capsys)


def test_a_checkpoint_of_another_key_is_caught(team, key, settings, capsys):
    record(team.pk)
    call_command("audit_checkpoint")
    checkpoint = AuditCheckpoint.objects.get()
    # Someone re-signs with a key of their own: the configured key says no.
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = raw_b64(Ed25519PrivateKey.generate())
    out = verify_fails(capsys)
    assert f"signed by key {checkpoint.key_fingerprint}, not by the configured key" in out
    # A verifying host needs only the public key.
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = ""
    settings.TRUSTRANK_AUDIT_VERIFY_KEY = public
    assert "agrees" in verify(capsys)


def test_without_a_key_checkpoint_is_refused_clearly(team, settings):
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = ""
    settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE = ""
    with pytest.raises(CommandError, match="no audit signing key: set TRUSTRANK_AUDIT_SIGNING"):
        call_command("audit_checkpoint")
    assert not AuditCheckpoint.objects.exists()


def test_a_bad_key_is_refused_without_echoing_it(team, settings):
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = "not-a-key-secret-value"
    with pytest.raises(CommandError) as refused:
        call_command("audit_checkpoint")
    assert "TRUSTRANK_AUDIT_SIGNING_KEY is not" in str(refused.value)
    assert "secret-value" not in str(refused.value)


def test_pem_key_from_a_file(team, settings, tmp_path, capsys):
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = tmp_path / "audit.pem"
    path.write_bytes(pem)
    settings.TRUSTRANK_AUDIT_SIGNING_KEY = ""
    settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE = str(path)
    settings.TRUSTRANK_AUDIT_VERIFY_KEY = ""
    record(team.pk)
    call_command("audit_checkpoint")
    assert "agrees" in verify(capsys)
    settings.TRUSTRANK_AUDIT_SIGNING_KEY_FILE = str(tmp_path / "missing.pem")
    with pytest.raises(CommandError, match="cannot be read"):
        call_command("audit_checkpoint")


def test_a_broken_chain_is_not_sealed(team, key):
    events = [record(team.pk) for _ in range(2)]
    tamper("UPDATE findings_auditevent SET reason = 'x' WHERE id = %s", [events[0].pk])
    with pytest.raises(CommandError, match=f"broken at event {events[0].pk}"):
        call_command("audit_checkpoint")


def test_audit_page_shows_the_last_checkpoint(client, team, key, make_user):
    events = [record(team.pk, reason=f"r{i}") for i in range(2)]
    call_command("audit_checkpoint")
    checkpoint = AuditCheckpoint.objects.get()
    client.force_login(make_user("ann", team=team))
    chain = client.get("/audit/chain/").content.decode()
    assert "Last checkpoint" in chain and "agrees" in chain and f"#{checkpoint.pk}" in chain
    reseal(team.pk, events[0].pk, reason="forged")
    chain = client.get("/audit/chain/").content.decode()
    assert "disagrees" in chain and f"event {events[-1].pk}" in chain
