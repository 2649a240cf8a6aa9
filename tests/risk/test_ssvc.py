from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trustrank.risk.ssvc import decision_rank, deployer_decision, load_deployer_table

CSV = ROOT / "trustrank" / "risk" / "data" / "deployer_patch_application_priority_1_0_0.csv"


def test_shipped_table_is_the_corpus_copy_with_provenance():
    assert len(load_deployer_table()) == 72
    readme = (CSV.parent / "README.md").read_text()
    assert "PROVENANCE" in readme and "ce4d811bb629e683f5a67577ba02fd28561b156d" in readme
    corpus = Path("/work/shared/corpus/ssvc") / CSV.name
    if corpus.exists():
        assert corpus.read_bytes() == CSV.read_bytes()


@pytest.mark.parametrize(
    ("row", "exploitation", "exposure", "automatable", "impact", "decision"),
    [
        (0, "none", "small", False, "low", "defer"),
        (2, "none", "small", False, "high", "scheduled"),
        (23, "none", "open", True, "very high", "out-of-cycle"),
        (39, "public poc", "controlled", True, "very high", "out-of-cycle"),
        (52, "active", "small", True, "low", "scheduled"),
        (64, "active", "open", False, "low", "scheduled"),
        (67, "active", "open", False, "very high", "immediate"),
        (69, "active", "open", True, "medium", "out-of-cycle"),
        (70, "active", "open", True, "high", "immediate"),
    ],
)
def test_lookups_match_rows_of_the_csv(row, exploitation, exposure, automatable, impact,
                                       decision):
    rows = list(csv.reader(CSV.read_text().splitlines()))
    r = rows[row + 1]
    assert r[0] == str(row)
    assert r[1:6] == [exploitation, exposure, "yes" if automatable else "no", impact, decision]
    assert deployer_decision(exploitation=exploitation, exposure=exposure,
                             automatable=automatable, human_impact=impact) == decision


def test_every_csv_row_is_looked_up_as_written():
    for r in list(csv.DictReader(CSV.read_text().splitlines())):
        values = list(r.values())
        assert deployer_decision(exploitation=values[1], exposure=values[2],
                                 automatable=values[3] == "yes",
                                 human_impact=values[4]) == values[5]


def test_decisions_are_ordered_by_urgency():
    assert [decision_rank(d) for d in ("defer", "scheduled", "out-of-cycle", "immediate")] == [
        0, 1, 2, 3]
