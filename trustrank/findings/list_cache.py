"""The findings list's pages kept whole, under the teams' findings generation.

A hundred analysts of one team ask for the same few lists (the default list, KEV, criticals,
the first pages of a search) again and again. Rendering a page of 50 findings is the bulk of
a request: ~30 ms of DRF serialization for the API, ~50 ms of templates for the page, for
rows that change only when a finding, a rank, a due date or a Jira link does. So the page's
part that depends on the findings alone (the API's `count` and `results`; the page's table
fragment) is kept in the cache shared by the web workers, keyed by:

- the caller's teams, and what else a page shows that differs between callers of the same
  teams (who `assignee=me` means, whether triage controls show);
- the request's query string as sent (the same string validated the same way before, so a
  hit never skips a 400);
- the day (`overdue` follows the date);
- the teams' generation (`generation.findings_generation`): a write to a finding, a ranking run,
  a deletion, a Jira link or a triage policy makes a new key, so a page never outlives them.

What the generation does not follow (a project or user renamed) shows within
`TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS` (entries expire then); 0 turns the cache off.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from trustrank.findings.generation import findings_generation


def list_cache_key(
    *, what: str, team_ids: Iterable[int], query: str, viewer: tuple[Any, ...] = (),
    by_generation: bool = True,
) -> str | None:
    """The key of one list page, None when the cache is off. `by_generation` false: for a
    part that shows no finding (the filter form), which a write must not make new."""
    if settings.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS <= 0:
        return None
    ids = sorted({int(t) for t in team_ids})
    digest = hashlib.sha256(repr((what, ids, query, viewer)).encode()).hexdigest()[:32]
    generation = findings_generation(team_ids=ids) if by_generation else "-"
    # The format of a kept value may change between releases: its version is in the key.
    return f"findings-list:v3:{generation}:{timezone.localdate().isoformat()}:{digest}"


def list_cache_get(key: str | None) -> Any:
    return None if key is None else cache.get(key)


def list_cache_set(key: str | None, value: Any) -> None:
    if key is not None:
        cache.set(key, value, timeout=settings.TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS)
