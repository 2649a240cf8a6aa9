from __future__ import annotations

import pytest

from trustrank.risk.scoring import exploitation_of, is_automatable, kind_decision, parse_vector


@pytest.mark.parametrize(
    ("vector", "expected"),
    [
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", True),
        ("CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", True),
        ("cvss:3.1/av:n/ac:l/pr:n/ui:n/s:u/c:h/i:h/a:h", True),
        ("AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", True),
        ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", False),
        ("CVSS:3.1/AV:L/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", False),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H", False),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H", False),
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N", True),
        ("CVSS:4.0/AV:N/AC:L/AT:P/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N", False),
        ("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:P/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N", False),
        (" CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N ", True),
        ("CVSS:3.1/AV:N/AC:L", None),
        ("(AV:N/AC:L/Au:N/C:P/I:P/A:P)", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_automatable_from_cvss_vectors(vector, expected):
    assert is_automatable(vector) is expected


def test_vector_versions():
    assert parse_vector("(AV:N/AC:L/Au:N/C:P/I:P/A:P)")[0] == "2"
    assert parse_vector("AV:N/AC:L/AT:N/PR:N/UI:N")[0] == "4"


def test_exploitation_states():
    assert exploitation_of(in_kev=True, epss=None, threshold=0.1) == "active"
    assert exploitation_of(in_kev=False, epss=0.1, threshold=0.1) == "public poc"
    assert exploitation_of(in_kev=False, epss=0.0999, threshold=0.1) == "none"
    assert exploitation_of(in_kev=False, epss=None, threshold=0.1) == "none"


def test_one_queue_table():
    assert kind_decision(kind="identity", sub_kind="expired", exposure="open",
                         human_impact="medium") == "out-of-cycle"
    assert kind_decision(kind="identity", sub_kind="expired", exposure="open",
                         human_impact="very high") == "immediate"
    assert kind_decision(kind="reliability", sub_kind="broken_context", exposure="controlled",
                         human_impact="medium") == "defer"
    assert kind_decision(kind="reliability", sub_kind="broken_context", exposure="open",
                         human_impact="low") == "defer"
    assert kind_decision(kind="identity", sub_kind="something new", exposure="small",
                         human_impact="low") == "defer"


def test_one_queue_table_is_monotone_in_exposure_and_impact():
    from trustrank.risk.inputs import DECISIONS, EXPOSURES, HUMAN_IMPACTS
    from trustrank.risk.scoring import KIND_TABLE

    for kind, sub in KIND_TABLE:
        for x in EXPOSURES:
            ranks = [DECISIONS.index(kind_decision(kind=kind, sub_kind=sub, exposure=x,
                                                   human_impact=h)) for h in HUMAN_IMPACTS]
            assert ranks == sorted(ranks)
        for h in HUMAN_IMPACTS:
            ranks = [DECISIONS.index(kind_decision(kind=kind, sub_kind=sub, exposure=x,
                                                   human_impact=h)) for x in EXPOSURES]
            assert ranks == sorted(ranks)
