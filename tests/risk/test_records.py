from __future__ import annotations

import dataclasses
from datetime import date

import pytest

from trustrank.risk.inputs import Finding, findings_from_columns


def _rows() -> list[Finding]:
    return [
        Finding(id="1", vuln_id="CVE-2024-1", severity="high", cvss_score=7.5,
                cvss_vector="CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", in_kev=True,
                kev_date=date(2024, 1, 2), epss=0.3, epss_percentile=0.9,
                epss_date=date(2024, 1, 3), project_version="7", component_key="pkg:npm/a",
                baseline=61.25),
        Finding(id="2", kind="identity", sub_kind="expired", environment="prod",
                service="api", subject="ab12"),
    ]


def test_findings_made_column_by_column_are_the_records_the_constructor_makes():
    rows = _rows()
    columns = {f.name: [getattr(r, f.name) for r in rows] for f in dataclasses.fields(Finding)}
    made = findings_from_columns(len(rows), columns)
    assert made == rows
    assert [hash(f) for f in made] == [hash(f) for f in rows]
    assert [repr(f) for f in made] == [repr(f) for f in rows]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].id = "3"  # type: ignore[misc]


def test_findings_made_column_by_column_need_every_field():
    rows = _rows()
    columns = {f.name: [getattr(r, f.name) for r in rows] for f in dataclasses.fields(Finding)}
    del columns["subject"]
    with pytest.raises(ValueError, match="every field"):
        findings_from_columns(len(rows), columns)


def test_queue_scores_are_shared_floats_of_the_same_values():
    """The queue's scores share one float per distinct value; values the clamp never gives
    (a negative zero, NaN) are kept as they are rather than shared."""
    import math

    import numpy as np
    import orjson

    from trustrank.risk.queue import _shared_scores

    score = np.array([50.0, 12.3456, 50.0, 0.0, 100.0, 12.3456])
    shared = list(_shared_scores(score))
    assert shared == score.tolist() and all(type(x) is float for x in shared)
    assert shared[0] is shared[2] and shared[1] is shared[5]
    odd = np.array([0.0, -0.0, math.nan, 1.0])
    assert orjson.dumps(list(_shared_scores(odd))) == orjson.dumps(odd.tolist())
