"""The job kind "finding_groups": a kept page of finding groups (`findings.group_kept`)
grouped again at the findings' current generation. Here rather than in the findings app:
a page orders its groups by the ranks this app counts (`ranks.rank_sql`)."""

from __future__ import annotations

import time
from typing import Any

from django.utils import timezone

from trustrank.findings import group_kept, groups
from trustrank.findings.filters import FindingFilterSet
from trustrank.findings.generation import findings_generation
from trustrank.findings.records import FindingGroupsJob
from trustrank.findings.selectors import finding_list_for_teams
from trustrank.findings.services.bulk_selection import filter_querydict
from trustrank.jobs.errors import JobRejected
from trustrank.ranking.ranks import rank_sql


def finding_groups_job_handle(*, job: FindingGroupsJob, progress: Any) -> dict[str, Any]:
    """The page grouped at the generation read first (a write meanwhile leaves the page
    older than the findings, so the next view asks for it again), stored on the row with
    it. Atomic with the row's finish: a killed attempt leaves nothing but the row to run
    again; the key's older pages go with the finish."""
    progress(phase="grouping")
    generation = findings_generation(team_ids=job.team_ids)
    filterset = FindingFilterSet(filter_querydict(job.filter),
                                 queryset=finding_list_for_teams(job.team_ids))
    if not filterset.is_valid():  # it was when asked for: a choice since removed
        raise JobRejected(f"the groups' filter is no longer valid: {dict(filterset.errors)}")
    started = time.perf_counter()
    page = groups.page_computed(qs=filterset.qs, by=job.by, limit=job.limit,
                                offset=job.offset, rank_sql=rank_sql)
    group_kept.older_dropped(job.key, team_id=job.team_id, before=timezone.now())
    return {"generation": generation, "page": group_kept.page_pickled(page),
            "seconds": time.perf_counter() - started}
