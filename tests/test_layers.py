"""The layers import one way (docs/architecture.md, "Layers").

- Pure engines (`trustrank/parsers/**`, `trustrank/risk/**`, an app's `engine` module or
  package) import no Django and no trustrank code but the engines below them. Checked twice:
  importing every module in a fresh interpreter proves what it really pulls in at run time
  (a transitive import counts), and an AST walk proves it for each file's own imports.
- Apps import only apps of lower layers (`LAYERS`). An AST walk over every module, imports
  inside functions included, fails on any upward import. Interface modules (pages, API
  views, serializers, URLconfs, commands) sit above every domain service: they may read any
  app, but never call the services or tasks of an app above their own.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lower first. Apps of one layer are peers and may use one another; none may import an app
# of a higher layer. Update docs/architecture.md with this list.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"lib", "accounts", "jobs", "notify"}),
    frozenset({"findings"}),
    frozenset({"inventory", "vulns", "runtime", "identity", "cluster", "jira"}),
    frozenset({"ranking"}),
    frozenset({"exports", "gate"}),
    frozenset({"ingest"}),
)
LAYER_OF = {app: level for level, apps in enumerate(LAYERS) for app in apps}

# Wiring above every layer: it names every app (URLconf, settings, the Celery app).
WIRING = {"trustrank", "trustrank.settings", "trustrank.settings.site",
          "trustrank.settings.evidence", "trustrank.settings.outputs", "trustrank.urls",
          "trustrank.celery",
          "trustrank.wsgi"}

# Pure engines, lowest first, and the other engines each may import. An app's `engine`
# module or package is one too: any layer may use it, so it must be as pure.
ENGINES: dict[str, tuple[str, ...]] = {
    "trustrank.parsers": (),
    "trustrank.risk": ("trustrank.parsers",),
    # An app's engine: its `engine` package or `engine.py`, with the `engine_*.py` modules
    # beside it; they may import each other.
    **{
        f"trustrank.{path.parent.name}.{path.name.removesuffix('.py')}": (
            "trustrank.parsers", "trustrank.risk",
            *(f"trustrank.{path.parent.name}.{other.name.removesuffix('.py')}"
              for other in sorted(path.parent.glob("engine*"))
              if other != path and (other.name in ("engine", "engine.py")
                                    or other.name.startswith("engine_"))),
        )
        for path in sorted(ROOT.glob("trustrank/*/engine*"))
        if path.name in ("engine", "engine.py") or (
            path.name.startswith("engine_") and path.suffix == ".py")
    },
}

# Modules that answer a person or a client (or an operator's command). They may read any
# app's models, selectors, serializers and read helpers.
_INTERFACE_FILES = {"views.py", "apis.py", "serializers.py", "urls.py", "api_urls.py",
                    "admin.py", "forms.py"}
# What an interface module may not import from an app above its own: its writes and jobs.
_WRITE_PARTS = {"services", "tasks"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _path_of(module: str) -> Path | None:
    base = ROOT / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _modules(package: str) -> list[str]:
    """The package and every module under it, subpackages included."""
    path = _path_of(package)
    assert path is not None, package
    if path.name != "__init__.py":
        return [package]
    return sorted(_module_name(p) for p in path.parent.rglob("*.py"))


def _engine_of(module: str) -> str | None:
    for engine in ENGINES:
        if module == engine or module.startswith(f"{engine}."):
            return engine
    return None


def app_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "ingest":
        return "ingest"
    if parts[0] == "trustrank" and len(parts) > 1 and module not in WIRING:
        return parts[1]
    return None


def is_interface(path: Path) -> bool:
    rel = path.relative_to(ROOT).parts
    name = rel[-1]
    return (
        name in _INTERFACE_FILES
        or name.endswith(("_views.py", "_apis.py"))
        or "commands" in rel[:-1]
        or "templatetags" in rel[:-1]
    )


@dataclass(frozen=True)
class Import:
    module: str
    line: int


def imports_of(source: str, *, module: str, is_package: bool = False) -> list[Import]:
    """Every import in the source, at any depth (in functions, in `if TYPE_CHECKING:`...),
    as absolute module names; `from a import b` names `a.b` when that is a module."""
    found: list[Import] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append(Import(full if _path_of(full) else base, node.lineno))
    return found


def violations(path: Path, source: str) -> list[str]:
    """Why each import of this file breaks the layers ([] when none does)."""
    module = _module_name(path)
    engine = _engine_of(module)
    mine = app_of(module)
    interface = is_interface(path)
    found = imports_of(source, module=module, is_package=path.name == "__init__.py")
    out: list[str] = []
    for imp in found:
        target = imp.module
        where = f"{path.relative_to(ROOT)}:{imp.line} imports {target}"
        if engine is not None:
            allowed = (engine, *ENGINES[engine])
            if target.split(".")[0] in {"django", "rest_framework", "celery", "ingest"} or (
                target.startswith("trustrank") and _engine_of(target) not in allowed
            ):
                out.append(f"{where}: a pure engine imports only {', '.join(allowed)}")
            continue
        theirs = app_of(target)
        if mine is None or theirs is None or theirs == mine or _engine_of(target):
            continue
        if theirs not in LAYER_OF:
            out.append(f"{where}: app {theirs!r} has no layer in tests/test_layers.py")
            continue
        if mine not in LAYER_OF:
            out.append(f"{where}: app {mine!r} has no layer in tests/test_layers.py")
            continue
        if LAYER_OF[theirs] <= LAYER_OF[mine]:
            continue
        if theirs == "ingest":
            out.append(f"{where}: nothing under trustrank/ imports ingest")
        elif not interface:
            out.append(f"{where}: {mine} is below {theirs} (an upward import)")
        elif _WRITE_PARTS & set(target.split(".")[2:]):
            out.append(
                f"{where}: an interface of {mine} may read {theirs} but not call its "
                "services or tasks"
            )
    return out


def _sources() -> list[Path]:
    return sorted([*(ROOT / "trustrank").rglob("*.py"), *(ROOT / "ingest").rglob("*.py")])


# --- The tree as it is -------------------------------------------------------------------------


def test_every_app_has_a_layer() -> None:
    apps = {p.name for p in (ROOT / "trustrank").iterdir()
            if p.is_dir() and (p / "__init__.py").exists()
            and f"trustrank.{p.name}" not in WIRING}
    engines = {e.split(".")[1] for e in ENGINES if e.count(".") == 1}
    assert apps - engines - set(LAYER_OF) == set()


def test_no_module_imports_upward() -> None:
    offenders = [v for path in _sources() for v in violations(path, path.read_text())]
    assert offenders == []


_PROBE = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    before = set(sys.modules)
    importlib.import_module(name)
    out[name] = sorted(set(sys.modules) - before)
print(json.dumps(out))
"""


@pytest.mark.parametrize("engine", list(ENGINES))
def test_pure_engine_pulls_in_no_django_nor_other_code_at_run_time(engine: str) -> None:
    modules = _modules(engine)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    allowed = (engine, *ENGINES[engine])
    bad = {}
    # Each module is charged with what its own import first brought in.
    for module, loaded in json.loads(out.stdout).items():
        wrong = [
            m for m in loaded
            if m.split(".")[0] in {"django", "rest_framework", "celery", "ingest"}
            or (m.startswith("trustrank.") and _engine_of(m) not in allowed
                # a package's __init__ on the way down (trustrank.vulns for its engine)
                and not engine.startswith(f"{m}."))
        ]
        if wrong:
            bad[module] = wrong
    assert bad == {}


def test_every_subpackage_of_the_engines_is_checked() -> None:
    checked = {m for engine in ENGINES for m in _modules(engine)}
    assert {"trustrank.risk.cluster.gpu", "trustrank.risk.scheduling",
            "trustrank.vulns.engine.versions", "trustrank.identity.engine"} <= checked


# --- The checker itself ------------------------------------------------------------------------


def _check(relpath: str, source: str) -> list[str]:
    return violations(ROOT / relpath, source)


def test_an_upward_import_in_a_domain_module_fails() -> None:
    assert _check("trustrank/findings/groups.py", "from trustrank.ranking.models import X\n")
    assert _check("trustrank/vulns/tasks.py", "import trustrank.ranking.services\n")
    assert _check("trustrank/accounts/services.py", "from trustrank.findings import models\n")
    assert _check("trustrank/ranking/models.py", "from ingest.models import IngestJob\n")


def test_an_upward_import_inside_a_function_fails_too() -> None:
    source = "def f():\n    from trustrank.ranking.services.requests import r\n    r()\n"
    (why,) = _check("trustrank/cluster/services/diagnoses.py", source)
    assert "cluster is below ranking" in why and "diagnoses.py:2" in why


def test_relative_imports_are_resolved() -> None:
    assert _check("trustrank/findings/groups.py", "from ..ranking import models\n")
    assert not _check("trustrank/findings/groups.py", "from .models import Finding\n")


def test_downward_and_peer_imports_pass() -> None:
    assert not _check("trustrank/ranking/inputs.py", "from trustrank.runtime.models import S\n")
    assert not _check("trustrank/cluster/services/d.py", "from trustrank.runtime import models\n")
    assert not _check("trustrank/findings/filters.py", "from trustrank.vulns.engine import v\n")


def test_an_interface_may_read_a_higher_app_but_not_call_its_services_or_tasks() -> None:
    read = "from trustrank.ranking import selectors\nfrom trustrank.ranking.explain import e\n"
    assert not _check("trustrank/runtime/views.py", read)
    assert not _check("trustrank/findings/serializers.py", read)
    assert not _check("trustrank/findings/group_apis.py", read)
    assert not _check("trustrank/findings/views.py", read)
    write = "from trustrank.ranking.services.requests import ranking_run_request\n"
    assert _check("trustrank/runtime/views.py", write)
    assert _check("trustrank/runtime/apis.py", "from trustrank.ranking.tasks import t\n")
    # The same read from a domain module is upward.
    assert _check("trustrank/runtime/selectors.py", read)
    # And no interface under trustrank/ imports ingest.
    assert _check("trustrank/findings/views.py", "from ingest.models import IngestJob\n")


def test_a_pure_engine_imports_no_django_and_no_higher_code() -> None:
    assert _check("trustrank/risk/cluster/gpu.py", "from django.db import models\n")
    assert _check("trustrank/parsers/otlp.py", "from trustrank.risk import inputs\n")
    assert _check("trustrank/risk/scheduling/x.py", "from trustrank.findings import models\n")
    assert _check("trustrank/vulns/engine/versions.py", "import trustrank.vulns.models\n")
    assert not _check("trustrank/risk/engine.py", "from trustrank.parsers.otlp import Span\n")
    assert not _check("trustrank/runtime/engine.py", "from trustrank.risk import addresses\n")
