"""The findings list's search box: which index answers a value, and how.

Everything matches case-insensitively on `Finding.search_text` (ids, aliases, package and
component names, the purl), by substring. Two refinements keep a million-finding team fast:

- A value that starts with `pkg:` can only match a purl, from its start: a btree range on the
  lower-cased purl (`findings_purl_prefix`), see `purl_condition`.
- A trigram GIN scan costs what its most common trigrams cost: every id shares those of `cve`
  and its year, every purl those of its type. Intersecting their posting lists (a million
  entries each) took 160 ms for `cve-2024-012` at 1M; asking the index for the value's
  distinctive words only (`012`) and checking the whole value on the candidates with
  `strpos` takes 3 ms plus the rows, with the same matches. See `substring_condition`.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q, QuerySet, Value
from django.db.models.functions import Lower, StrIndex

# Words that start or fill most identifiers: advisory schemes, purl types, years and the
# commonest namespace parts. Asking the trigram index for them narrows nothing.
COMMON_WORDS = frozenset((
    # advisory schemes
    "cve", "ghsa", "pysec", "rustsec", "osv", "gsd", "dsa", "dla", "usn", "rhsa", "rhba",
    "alas", "mal", "glsa", "cwe",
    # purl types
    "pkg", "npm", "maven", "pypi", "golang", "cargo", "nuget", "gem", "deb", "rpm", "apk",
    "composer", "hex", "pub", "swift", "cocoapods", "conan", "conda", "cran", "github",
    "bitbucket", "docker", "oci", "generic", "hackage", "qpm",
    # namespaces
    "org", "com", "net", "www", "apache", "google",
))
_WORD = re.compile(r"[a-z0-9]+")
_YEAR = re.compile(r"(19|20)\d\d")


def search_value(params: Any) -> str:
    """The search box's value in these query parameters, stripped ("" for none)."""
    return str((params or {}).get("q") or "").strip()


def is_purl_search(lowered: str) -> bool:
    """A lower-cased search value that can only match purls, from their start."""
    return lowered.startswith("pkg:") and len(lowered) > len("pkg:")


def purl_condition(qs: QuerySet, lowered: str) -> QuerySet:
    return qs.alias(purl_lower=Lower("component_purl")).filter(purl_lower__startswith=lowered)


def distinctive_words(lowered: str) -> list[str]:
    """The value's words of three characters or more that are not common to most findings,
    in order, without repeats; empty when it has none."""
    words = [
        w for w in _WORD.findall(lowered)
        if len(w) >= 3 and w not in COMMON_WORDS and not _YEAR.fullmatch(w)
    ]
    return list(dict.fromkeys(words))


def substring_condition(qs: QuerySet, spellings: list[str]) -> QuerySet:
    """Findings whose search text contains any of the (lower-cased) spellings."""
    cond = Q()
    for n, s in enumerate(spellings):
        words = distinctive_words(s)
        if not words or words == [s]:
            cond |= Q(search_text__contains=s)
            continue
        # Each word is a substring of the value, so the index's candidates include every
        # match; strpos then keeps the exact ones.
        at = f"search_at_{n}"
        qs = qs.alias(**{at: StrIndex("search_text", Value(s))})
        part = Q(**{f"{at}__gt": 0})
        for w in words:
            part &= Q(search_text__contains=w)
        cond |= part
    return qs.filter(cond)
