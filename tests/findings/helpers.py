"""Findings made directly (many at once), for triage tests that need volume, not evidence."""

from __future__ import annotations

from trustrank.findings.models import Finding


def many_findings(team, n: int, *, prefix: str = "f", **values) -> list[int]:
    """n open vulnerability findings of `team`; returns their ids in id order."""
    rows = [
        Finding(
            team=team,
            kind="vulnerability",
            source="osv",
            fingerprint=f"{prefix}-{team.pk}-{i}",
            title=f"finding {i}",
            severity="high",
            severity_score=8.0,
            vuln_id=values.get("vuln_id", f"GHSA-{prefix}{i:04d}-aaaa-bbbb"),
            cve_id=values.get("cve_id", f"CVE-2024-{10000 + i}"),
            aliases=values.get("aliases", [f"CVE-2024-{10000 + i}"]),
            package_name=values.get("package_name", f"pkg-{prefix}-{i}"),
            component_name=values.get("component_name", f"pkg-{prefix}-{i}"),
            component_purl=values.get("component_purl", f"pkg:npm/pkg-{prefix}-{i}@1.0.0"),
            ecosystem="npm",
        )
        for i in range(n)
    ]
    Finding.objects.bulk_create(rows, batch_size=1000)
    return sorted(f.pk for f in rows)
