"""What a page of finding groups holds (`GroupPage` of `FixGroup` or `VulnerabilityGroup`)
and how a group's decision level reads; the queries that fill them are in `groups`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trustrank.findings.choices import Severity, title_line
from trustrank.risk.inputs import DECISIONS

SEVERITY_ORDER = [s.value for s in Severity]  # critical first


def decision_for_level(level: int | None) -> str | None:
    if not level:
        return None
    return DECISIONS[level - 1]


def severity_for_level(level: int | None) -> str:
    if not level:
        return Severity.UNKNOWN.value
    return SEVERITY_ORDER[len(SEVERITY_ORDER) - level]


@dataclass(frozen=True)
class ProjectRef:
    id: int
    name: str


@dataclass
class Bucket:
    """Findings of one group that share an outcome (closed by the target, or not)."""

    count: int = 0
    kev: int = 0
    level: int = 0
    best_rank: int | None = None
    project_ids: set[int] = field(default_factory=set)
    ids: list[int] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        self.count += row["n"]
        self.kev += row["kev"]
        self.level = max(self.level, row["level"] or 0)
        if row["rank"] is not None:
            self.best_rank = (
                row["rank"] if self.best_rank is None else min(self.best_rank, row["rank"])
            )
        self.project_ids.update(p for p in row["projects"] or [] if p is not None)
        self.ids.extend(row["ids"] or [])


@dataclass(frozen=True)
class FixGroup:
    ecosystem: str
    package: str
    # The smallest version that fixes every finding of the group that has a fix; None when
    # none has one.
    target_version: str | None
    findings_closed: int
    projects: tuple[ProjectRef, ...]
    highest_decision: str | None
    best_rank: int | None
    kev_count: int
    finding_ids: tuple[int, ...]
    # Findings of the package no fixed version above the installed one closes ("no fix yet"),
    # or whose versions this ecosystem's scheme cannot compare.
    no_fix_count: int
    no_fix_projects: tuple[ProjectRef, ...]
    no_fix_finding_ids: tuple[int, ...]
    findings_total: int

    @property
    def sentence(self) -> str:
        if self.target_version is None:
            return (
                f"no fix yet for {_n(self.no_fix_count, 'finding')} of {self.package} in "
                f"{_n(len(self.no_fix_projects), 'project')}"
            )
        return (
            f"upgrade {self.package} to {self.target_version} closes "
            f"{_n(self.findings_closed, 'finding')} in {_n(len(self.projects), 'project')}"
        )

    @property
    def finding_ids_truncated(self) -> bool:
        return len(self.finding_ids) < self.findings_closed


@dataclass(frozen=True)
class VulnerabilityGroup:
    vuln_id: str
    aliases: tuple[str, ...]
    cve_id: str
    severity: str
    in_kev: bool
    findings_count: int
    open_count: int
    states: dict[str, int]
    projects: tuple[ProjectRef, ...]
    components: tuple[str, ...]  # "name@version", distinct
    versions: tuple[str, ...]  # installed versions, distinct
    packages: tuple[str, ...]
    highest_decision: str | None
    best_rank: int | None
    finding_ids: tuple[int, ...]
    # The advisory's summary (or its details' first line), as its findings carry it.
    title: str = ""

    @property
    def display_title(self) -> str:
        return title_line(self.title) or self.vuln_id

    @property
    def sentence(self) -> str:
        return (
            f"{self.vuln_id} affects {_n(self.findings_count, 'finding')} in "
            f"{_n(len(self.projects), 'project')}"
        )


@dataclass(frozen=True)
class GroupPage:
    by: str
    count: int  # groups in all, not just this page
    groups: list[Any]
    # A kept page shown while it is grouped again (`group_kept`): when it was computed.
    as_of: datetime | None = None
    refreshing: bool = False

    @property
    def pending(self) -> bool:
        """No grouping is kept yet: a job is grouping the page for the first time (it has
        no groups, and `count` is 0)."""
        return self.refreshing and self.as_of is None


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
