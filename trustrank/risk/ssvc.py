"""The CERT/CC SSVC Deployer decision table, loaded from the CSV shipped in `data/`.

Our values are the table's own spellings (`public poc`, `very high`, `out-of-cycle`), so
the mapping is the identity; `load_deployer_table` checks that every combination is
present exactly once and fails loudly if a replaced file does not match.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources
from itertools import product

from trustrank.risk.inputs import (
    DECISIONS,
    EXPLOITATIONS,
    EXPOSURES,
    HUMAN_IMPACTS,
    Decision,
    Exploitation,
    Exposure,
    HumanImpact,
)

TABLE_FILE = "deployer_patch_application_priority_1_0_0.csv"
# Columns as the CSV header names them (version suffixes included).
_COLUMNS = (
    "Exploitation v1.1.0",
    "System Exposure v1.0.1",
    "Automatable v2.0.0",
    "Human Impact v2.0.2",
    "Defer, Scheduled, Out-of-Cycle, Immediate v1.0.0",
)

DeployerKey = tuple[Exploitation, Exposure, bool, HumanImpact]


class DecisionTableError(ValueError):
    """The shipped decision table is not the CERT/CC Deployer table we expect."""


@cache
def load_deployer_table() -> dict[DeployerKey, Decision]:
    text = resources.files("trustrank.risk").joinpath("data", TABLE_FILE).read_text("utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or any(c not in rows[0] for c in _COLUMNS):
        raise DecisionTableError(f"{TABLE_FILE}: expected columns {_COLUMNS}")
    exploitation, exposure, automatable, impact, outcome = _COLUMNS
    table: dict[DeployerKey, Decision] = {}
    for row in rows:
        values = (row[exploitation], row[exposure], row[automatable], row[impact], row[outcome])
        e, x, a, h, d = values
        if (
            e not in EXPLOITATIONS
            or x not in EXPOSURES
            or a not in ("yes", "no")
            or h not in HUMAN_IMPACTS
            or d not in DECISIONS
        ):
            raise DecisionTableError(f"{TABLE_FILE}: unknown value in row {row}")
        key: DeployerKey = (e, x, a == "yes", h)  # type: ignore[assignment]
        if key in table:
            raise DecisionTableError(f"{TABLE_FILE}: duplicate row for {key}")
        table[key] = d  # type: ignore[assignment]
    missing = set(product(EXPLOITATIONS, EXPOSURES, (False, True), HUMAN_IMPACTS)) - set(table)
    if missing:
        raise DecisionTableError(f"{TABLE_FILE}: {len(missing)} combinations missing")
    return table


def deployer_decision(
    *,
    exploitation: Exploitation,
    exposure: Exposure,
    automatable: bool,
    human_impact: HumanImpact,
) -> Decision:
    return load_deployer_table()[(exploitation, exposure, automatable, human_impact)]


def decision_rank(decision: Decision) -> int:
    """0 for defer … 3 for immediate."""
    return DECISIONS.index(decision)
