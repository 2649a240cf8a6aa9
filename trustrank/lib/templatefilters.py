"""Template filters every template gets (settings.TEMPLATES "builtins")."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import template

from trustrank.lib.params import param_rows as job_param_rows

register = template.Library()

_LINK_SCHEMES = frozenset({"http", "https"})


@register.filter
def http_url(value: object) -> str:
    """The value when it is an absolute http(s) URL, else "": a reference URL from an
    advisory or an SBOM is someone else's text, and `javascript:` or `data:` in an href runs
    in our origin when clicked. Use as `{% if url|http_url %}<a href="{{ url|http_url }}">`."""
    text = str(value or "").strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    if parts.scheme.lower() not in _LINK_SCHEMES or not parts.netloc:
        return ""
    # Control characters could hide a scheme from this check but not from a browser.
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in text):
        return ""
    return text


@register.filter
def param_rows(value: object) -> list[tuple[str, str]]:
    """A job's parameters as (label, text) rows for templates/_params.html: human labels,
    and values as text (yes/no, lists joined), never Python's repr."""
    return job_param_rows(value)
