"""trustrank.risk stays pure: no Django, nothing from the rest of trustrank."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RISK = ROOT / "trustrank" / "risk"
ALLOWED_INTERNAL = ("trustrank.risk", "trustrank.parsers")


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_of_the_engine_names_django_or_other_apps():
    for path in sorted(RISK.rglob("*.py")):
        for name in _imported_names(path):
            assert not name.startswith(("django", "rest_framework", "celery")), (path, name)
            if name.startswith("trustrank"):
                assert name.startswith(ALLOWED_INTERNAL), (path, name)


def test_importing_the_engine_loads_neither_django_nor_other_apps():
    # The real trustrank/__init__.py starts the Celery app (and with it Django's settings
    # machinery); stand in an empty parent package so only the engine's own imports count.
    code = f"""
import sys, types
parent = types.ModuleType("trustrank")
parent.__path__ = [{str(ROOT / "trustrank")!r}]
sys.modules["trustrank"] = parent
import trustrank.risk
from trustrank.risk import rank
from tests.risk.seed import seed_inputs
rank(inputs=seed_inputs())
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "rest_framework", "celery")
             or (m.startswith("trustrank.") and not m.startswith({ALLOWED_INTERNAL!r})))
print(",".join(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", out.stdout
