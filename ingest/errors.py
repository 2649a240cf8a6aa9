"""Errors of the ingest layer. Domain services raise their own errors (ProjectNotFound,
InvalidEnvironment, parser errors…); the loaders turn them into IngestRejected, the submit
functions into SubmitRefused, and the receivers turn SubmitRefused into RFC 9457 problems."""

from __future__ import annotations


class IngestRejected(Exception):
    """Permanent: the payload itself is wrong. The job fails with this message; no retry.

    The message is shown to people as is, so it must say what is wrong and where.
    """


class IngestTransient(Exception):
    """Temporary: worth retrying later (a lock, a lost connection)."""


class SubmitRefused(Exception):
    """An upload refused before anything was stored. `reason` is one of the constants below;
    a receiver answers with the matching HTTP status, a command prints the detail."""

    INVALID = "invalid"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"

    def __init__(self, reason: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.title, self.detail = reason, title, detail
