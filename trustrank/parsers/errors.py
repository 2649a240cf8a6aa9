"""The one base class for "this input cannot be used at all".

Receivers and loaders catch `ParserError` (HTTP 400, job failed with its message); each
parser raises its own subclass so a message can say which format was expected."""

from __future__ import annotations


class ParserError(ValueError):
    """The bytes are not usable input for the parser that raised it."""
