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
    "trustrank.risk.cluster.rdma", "trustrank.risk.cluster.priorities",
]


def test_cluster_parsers_and_diagnoses_do_not_import_django():
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
