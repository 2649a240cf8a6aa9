"""DRF authentication by team API key, and scope-based permissions."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions

from trustrank.accounts.principal import principal_for_request
from trustrank.accounts.services import api_key_authenticate


def key_from_headers(meta: dict[str, Any]) -> str | None:
    key = meta.get("HTTP_X_API_KEY")
    if key:
        return str(key).strip()
    header = meta.get("HTTP_AUTHORIZATION", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`X-Api-Key: <key>` (Dependency-Track style) or `Authorization: Bearer <key>` (OTLP)."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        secret = key_from_headers(request.META)
        if not secret:
            return None
        key = api_key_authenticate(secret=secret)
        if key is None:
            raise exceptions.AuthenticationFailed("The API key is invalid or has been revoked.")
        from django.contrib.auth.models import AnonymousUser

        return (AnonymousUser(), key)

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="trustrank"'


class HasScope(permissions.BasePermission):
    """The principal must hold the view's scope in at least one team.

    Views declare `required_scope` (or `required_scopes`, a dict of HTTP method to scope);
    the default is `read`. Team-level checks happen again in the service or selector that
    touches a specific team's data.
    """

    message = "This credential lacks the scope this endpoint needs."

    def has_permission(self, request: Any, view: Any) -> bool:
        principal = principal_for_request(request)
        if not principal.scopes_by_team and principal.api_key is None:
            user = getattr(request, "user", None)
            if user is None or not user.is_authenticated:
                raise exceptions.NotAuthenticated(
                    "Authentication required: send an API key in X-Api-Key or "
                    "'Authorization: Bearer', or log in."
                )
        accepted = required_scope_for(view, request.method)
        if not any(principal.can(scope) for scope in accepted):
            wanted = "' or '".join(accepted)
            self.message = f"This credential lacks the '{wanted}' scope this endpoint needs."
            return False
        return True


def required_scope_for(view: Any, method: str) -> tuple[str, ...]:
    """The scopes any one of which admits the request (a view may accept several)."""
    scopes = getattr(view, "required_scopes", None)
    scope = (
        scopes[method] if scopes and method in scopes else getattr(view, "required_scope", "read")
    )
    return (scope,) if isinstance(scope, str) else tuple(scope)
