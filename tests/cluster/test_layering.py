"""STYLE.md: parsers and the risk engine never import Django."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

MODULES = [
    "trustrank.parsers.otlp_metrics", "trustrank.parsers.remote_write",
    "trustrank.parsers.prometheus_text", "trustrank.parsers.kubernetes",
    "trustrank.risk.cluster.gpu", "trustrank.risk.cluster.vllm",
    "trustrank.risk.cluster.scheduling", "trustrank.risk.cluster.io",
    "trustrank.risk.cluster.rdma", "trustrank.risk.cluster.priorities", "trustrank.risk.cluster.inputs",
]


def test_cluster_parsers_and_diagnoses_do_not_import_django():
    # The trustrank package itself starts the Celery app, which loads some of Django;
    # what matters is that these modules bring in nothing more (no ORM, no settings).
    code = (
        "import importlib, sys\n"
        "import trustrank\n"
        "before = set(sys.modules)\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('django', 'rest_framework')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
