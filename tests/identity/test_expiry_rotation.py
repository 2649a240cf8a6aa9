"""Issue 24: an expiry warning is relative to the certificate's lifetime and to the rotation
the identity's history shows. Certificates go through the upload API and the worker's
handler into PostgreSQL; the findings are read back from the Finding table."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from tests.identity.helpers import run_queued_jobs
from tests.identity.pki import Pki, make_pki, now
from trustrank.findings.choices import OPEN_STATES
from trustrank.findings.models import Finding

pytestmark = pytest.mark.django_db

PEM = "application/x-pem-file"
DAY = dt.timedelta(days=1)


def _upload(client, body: bytes) -> None:
    resp = client.post("/api/v1/certificates?environment=prod", data=body, content_type=PEM)
    assert resp.status_code == 202, resp.content
    jobs = run_queued_jobs()
    assert all(j.status == "done" for j in jobs), [j.error for j in jobs]


def _bundle(client, pki: Pki) -> None:
    resp = client.put("/api/v1/environments/prod/trust-bundle", data=pki.root.pem,
                      content_type=PEM)
    assert resp.status_code == 202, resp.content
    run_queued_jobs()


def _expiring(team) -> dict[str, Finding]:
    return {f.spiffe_id: f for f in Finding.objects.filter(
        team=team, kind="identity", category="expiring", state__in=OPEN_STATES)}


def _svid(pki: Pki, path: str, *, issued_days_ago: float, lifetime_days: float = 30) -> bytes:
    start = now() - dt.timedelta(days=issued_days_ago)
    return pki.leaf(path, not_before=start, not_after=start + lifetime_days * DAY).pem


@pytest.fixture
def client(team, api):
    c = api(team, "certs:write", "read")
    _bundle(c, pki := make_pki())
    c.pki = pki
    return c


def test_a_30_day_svid_with_29_days_left_is_routine(team, client) -> None:
    _upload(client, _svid(client.pki, "/ns/a/sa/svid", issued_days_ago=1))
    assert _expiring(team) == {}


def test_a_one_year_certificate_with_29_days_left_still_warns(team, client) -> None:
    _upload(client, _svid(client.pki, "/ns/a/sa/yearly", issued_days_ago=336,
                          lifetime_days=365))
    (finding,) = _expiring(team).values()
    assert finding.severity == "medium"
    assert "lifetime 365 days" in finding.title
    assert "warns under 30 days left" in finding.title
    assert "no regular rotation observed" in finding.title
    assert finding.evidence["lifetime_hours"] == 365 * 24
    assert finding.evidence["rotation_missed"] is False


def test_a_30_day_svid_with_2_days_left_warns_without_history(team, client) -> None:
    _upload(client, _svid(client.pki, "/ns/a/sa/late", issued_days_ago=28))
    (finding,) = _expiring(team).values()
    assert "lifetime 30 days; warns under 10 days left" in finding.title
    assert finding.severity == "high"


def _rotated_history(pki: Pki, path: str, *, current_issued_days_ago: float) -> bytes:
    """Three earlier 30-day SVIDs, each replaced with 15 days left (every 15 days), then
    the current one."""
    body = b""
    start = now() - dt.timedelta(days=current_issued_days_ago) - 45 * DAY
    for _ in range(3):
        body += pki.leaf(path, not_before=start, not_after=start + 30 * DAY).pem
        start += 15 * DAY
    return body + _svid(pki, path, issued_days_ago=current_issued_days_ago)


def test_a_missed_rotation_warns_and_names_the_cadence(team, client) -> None:
    _upload(client, _rotated_history(client.pki, "/ns/a/sa/rotated", current_issued_days_ago=28))
    (finding,) = _expiring(team).values()
    assert finding.spiffe_id == "spiffe://prod.example/ns/a/sa/rotated"
    assert finding.severity == "high"
    assert finding.evidence["rotation_missed"] is True
    assert finding.evidence["rotations_observed"] == 3
    assert finding.evidence["rotation_lead_hours"] == 15 * 24
    assert ("its 3 earlier certificates were replaced with a median 15 days left (50% of "
            "their lifetime), so this one's rotation is overdue") in finding.title
    # The earlier certificates were replaced before they expired: no finding for them.
    assert Finding.objects.filter(team=team, category="expired", state__in=OPEN_STATES
                                  ).count() == 0


def test_within_the_observed_rotation_lead_is_routine(team, client) -> None:
    # 21 days left: more than the 15 days at which this identity is usually rotated.
    _upload(client, _rotated_history(client.pki, "/ns/a/sa/rotated", current_issued_days_ago=9))
    assert _expiring(team) == {}


def test_uploading_the_successor_resolves_the_predecessors_warning(team, client) -> None:
    _upload(client, _svid(client.pki, "/ns/a/sa/late", issued_days_ago=28))
    assert set(_expiring(team)) == {"spiffe://prod.example/ns/a/sa/late"}
    _upload(client, _svid(client.pki, "/ns/a/sa/late", issued_days_ago=0))
    assert _expiring(team) == {}


def test_the_thresholds_are_settings(team, client) -> None:
    with override_settings(TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION=1.0):
        _upload(client, _svid(client.pki, "/ns/a/sa/svid", issued_days_ago=1))
    (finding,) = _expiring(team).values()
    assert "warns under 30 days left" in finding.title
