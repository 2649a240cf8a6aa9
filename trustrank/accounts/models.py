"""Teams, memberships with roles, and team API keys."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import models


class Team(models.Model):
    """The unit of ownership: every project, job and finding belongs to exactly one team."""

    name = models.CharField(max_length=120, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    TRIAGER = "triager", "Triager"
    AUDITOR = "auditor", "Auditor (read and export)"
    VIEWER = "viewer", "Viewer"


class Scope(models.TextChoices):
    READ = "read", "Read"
    SBOM_WRITE = "sbom:write", "Upload SBOMs"
    TRACES_WRITE = "traces:write", "Export traces"
    CERTS_WRITE = "certs:write", "Upload certificates and trust bundles"
    METRICS_WRITE = "metrics:write", "Push cluster metrics and Kubernetes objects"
    # The earlier name of metrics:write; keys made with it keep working.
    TELEMETRY_WRITE = "telemetry:write", "Push cluster and GPU telemetry"
    TRIAGE = "triage", "Change triage state"
    ADMIN = "admin", "Administer the team (feeds, keys)"
    # Everything of the team to read and export, the audit log and its chain included;
    # grants no write. Holding it counts as holding `read` (IMPLIED_SCOPES).
    AUDIT_READ = "audit:read", "Audit: read and export everything, change nothing"


# Site-wide scopes: they change data every team shares (the advisory feeds), so no team role
# holds them and only the command line (`issue_api_key --scope feeds:write`) grants them.
FEEDS_WRITE = "feeds:write"
SITE_SCOPES = frozenset({FEEDS_WRITE})

# Scopes that grant others with them: an auditor's key opens every route that asks for `read`.
# Nothing else is implied; no scope implies a write.
IMPLIED_SCOPES: dict[str, frozenset[str]] = {Scope.AUDIT_READ: frozenset({Scope.READ})}


def scopes_with_implied(scopes: Iterable[str]) -> frozenset[str]:
    """The scopes a credential holds, with those they imply."""
    held = frozenset(str(s) for s in scopes)
    return held.union(*(IMPLIED_SCOPES.get(s, frozenset()) for s in held))


# What each role may do, expressed in API scopes so sessions and keys share one check.
ROLE_SCOPES: dict[str, frozenset[str]] = {
    Role.ADMIN: frozenset(Scope.values),
    Role.TRIAGER: frozenset(
        {
            Scope.READ,
            Scope.TRIAGE,
            Scope.SBOM_WRITE,
            Scope.TRACES_WRITE,
            Scope.CERTS_WRITE,
            Scope.METRICS_WRITE,
            Scope.TELEMETRY_WRITE,
        }
    ),
    Role.AUDITOR: frozenset({Scope.READ, Scope.AUDIT_READ}),
    Role.VIEWER: frozenset({Scope.READ}),
}


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_team_user_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ApiKey(models.Model):
    """A team API key. Only a SHA-256 digest of the secret is stored; the key is shown once.

    The key looks like `tr_<prefix>_<secret>`; the prefix is stored in clear to find the row
    and to let people recognise a key in lists without revealing it.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=120)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} (tr_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class LoginFailure(models.Model):
    """One failed sign-in: the audit trail of password guessing, and what the throttle
    counts (per account and per address, over a sliding window)."""

    username = models.CharField(max_length=150)
    address = models.GenericIPAddressField(null=True, blank=True)
    throttled = models.BooleanField(default=False)  # refused without checking the password
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["username", "at"], name="loginfailure_user_at"),
            models.Index(fields=["address", "at"], name="loginfailure_addr_at"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.at:%Y-%m-%d %H:%M:%S}"
