"""Parsers: bytes -> frozen dataclasses. No Django, no ORM; the bottom layer."""
