"""When a certificate's coming expiry deserves a finding (issue 24).

A fixed window ("expires within 30 days") turns every routine short-lived certificate into
a warning: a 30-day SPIFFE SVID is *always* within 30 days of its expiry. So the warning
is relative to the certificate's lifetime (notAfter − notBefore) and to the rotation the
history of the same identity shows:

- threshold = min(window, max(min(floor, lifetime / 2), fraction × lifetime)): a one-year
  certificate warns inside the window (30 days), a 30-day SVID inside a third of its life
  (10 days), a one-hour SVID inside half of it;
- rotation: when at least `min_rotations` earlier certificates of the identity were each
  replaced before they expired (the successor's notBefore before their notAfter), the
  median share of lifetime they had left when replaced is the identity's rotation lead.
  Then a certificate warns only once it is past that point as well (its rotation was
  missed): a SVID with 20 days left whose predecessors were replaced with 15 left is
  routine; one with 2 days left is overdue.
- A certificate already replaced (a later certificate of the identity whose notBefore is
  before this one's notAfter) gives no expiry finding at all: its expiry is the rotation.

The settings are `TRUSTRANK_IDENTITY_EXPIRY_*` (docs/identity.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from statistics import median
from typing import Any

Validity = tuple[datetime, datetime]  # not_before, not_after


@dataclass(frozen=True)
class ExpiryRules:
    fraction: float = 1 / 3
    floor: timedelta = timedelta(hours=24)
    min_rotations: int = 2


@dataclass(frozen=True)
class Rotation:
    """What the identity's earlier certificates show: how many were replaced before they
    expired, and the median share of their lifetime left when they were."""

    rotations: int
    lead_share: float
    lifetime: timedelta  # the median lifetime of the replaced certificates


def rotation_observed(history: Sequence[Validity], *, min_rotations: int) -> Rotation | None:
    """The identity's rotation cadence, or None when the history shows no regular one (too
    few replacements, or one that came only after the certificate had expired)."""
    ordered = sorted(set(history))
    shares: list[float] = []
    lifetimes: list[timedelta] = []
    for (start, end), (next_start, _next_end) in pairwise(ordered):
        lifetime = end - start
        if lifetime <= timedelta(0):
            continue
        if next_start >= end:
            return None  # replaced only after it expired: no rotation to rely on
        shares.append((end - next_start) / lifetime)
        lifetimes.append(lifetime)
    if len(shares) < max(1, min_rotations):
        return None
    seconds = median(lt.total_seconds() for lt in lifetimes)
    return Rotation(len(shares), median(shares), timedelta(seconds=seconds))


def superseded_by(not_before: datetime | None, not_after: datetime,
                  history: Sequence[Validity]) -> Validity | None:
    """The later certificate of the identity that replaced this one before it expired."""
    if not_before is None:
        return None
    later = [v for v in history if not_before < v[0] <= not_after]
    return min(later) if later else None


def _span(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    if hours >= 48:
        days = round(hours / 24)
        return f"{days} day{'' if days == 1 else 's'}"
    if hours >= 1:
        whole = round(hours)
        return f"{whole} hour{'' if whole == 1 else 's'}"
    minutes = max(0, round(hours * 60))
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


def time_left(delta: timedelta) -> str:
    return _span(delta)


def expiry_warning(*, not_before: datetime | None, not_after: datetime, now: datetime,
                   window: timedelta, rules: ExpiryRules,
                   rotation: Rotation | None) -> dict[str, Any] | None:
    """Why the certificate's expiry deserves a warning now, or None when it is routine.
    The dict goes into the finding's evidence; `explanation` is a sentence for people."""
    left = not_after - now
    if not_before is None or not_after <= not_before:
        lifetime = None
        threshold = window
        rule = f"warns inside the {_span(window)} window (no notBefore to size it by)"
    else:
        lifetime = not_after - not_before
        threshold = min(window, max(min(rules.floor, lifetime / 2), lifetime * rules.fraction))
        rule = (f"lifetime {_span(lifetime)}; warns under {_span(threshold)} left (the lesser "
                f"of the {_span(window)} window and {rules.fraction:.0%} of the lifetime, "
                f"at least {_span(min(rules.floor, lifetime / 2))})")
    if left >= threshold:
        return None
    evidence: dict[str, Any] = {
        "lifetime_hours": round(lifetime.total_seconds() / 3600, 2) if lifetime else None,
        "threshold_hours": round(threshold.total_seconds() / 3600, 2),
        "rotation_missed": False,
        "rotations_observed": rotation.rotations if rotation else 0,
        "rotation_lead_hours": None,
    }
    if rotation is None:
        evidence["explanation"] = f"{rule}; no regular rotation observed for this identity"
        return evidence
    lead = (lifetime or rotation.lifetime) * rotation.lead_share
    evidence["rotation_lead_hours"] = round(lead.total_seconds() / 3600, 2)
    if left >= lead:
        return None  # not yet where this identity's certificates are usually replaced
    evidence["rotation_missed"] = True
    evidence["explanation"] = (
        f"{rule}; its {rotation.rotations} earlier certificates were replaced with a median "
        f"{_span(lead)} left ({rotation.lead_share:.0%} of their lifetime), so this one's "
        f"rotation is overdue")
    return evidence
