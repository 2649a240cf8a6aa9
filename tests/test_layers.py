"""The layers import one way: ingest -> domain apps -> risk / parsers (docs/architecture.md).

Two checks. Importing each parser module in a fresh interpreter proves what it really pulls
in at run time (a transitive import counts too). An AST walk over the source proves the
direction for the code that only a running Django can import.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_PACKAGES = ("trustrank.parsers", "trustrank.risk")


def _modules(package: str) -> list[str]:
    path = ROOT / package.replace(".", "/")
    return [package] + [
        f"{package}.{info.name}" for info in pkgutil.iter_modules([str(path)])
    ]


_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("module", [m for p in PURE_PACKAGES for m in _modules(p)])
def test_pure_module_imports_neither_django_nor_other_trustrank_code(module: str) -> None:
    package = module.rsplit(".", 1)[0] if module not in PURE_PACKAGES else module
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, module],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    loaded = json.loads(out.stdout)
    assert not [m for m in loaded if m == "django" or m.startswith("django.")], module
    assert not [m for m in loaded if m == "ingest" or m.startswith("ingest.")], module
    outside = [
        m
        for m in loaded
        if m.startswith("trustrank.") and not m.startswith(f"{package}.") and m != package
    ]
    assert outside == [], f"{module} imports {outside}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_domain_apps_never_import_ingest() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imports(path) if name == "ingest" or name.startswith("ingest.")
        )
        for path in _sources("trustrank")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_pure_layers_never_import_django() -> None:
    offenders: dict[str, list[str]] = {}
    for package in PURE_PACKAGES:
        for path in _sources(package.replace(".", "/")):
            bad = sorted(
                name
                for name in _imports(path)
                if name == "django"
                or name.startswith(("django.", "rest_framework", "celery"))
                or (
                    name.startswith("trustrank.")
                    and not name.startswith(package)
                    # The engine reads the parsers' plain records; both are pure.
                    and not (package == "trustrank.risk" and name.startswith("trustrank.parsers"))
                )
            )
            if bad:
                offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}
