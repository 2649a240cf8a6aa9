"""OpenAPI description of the API-key authentication (drf-spectacular extension)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "trustrank.accounts.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "X-Api-Key",
            "description": "A team API key (`Authorization: Bearer <key>` works too).",
        }
