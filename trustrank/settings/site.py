"""Where the checkout and its working files are, and whether this process runs the tests:
what every settings module reads first."""

from __future__ import annotations

import sys
from pathlib import Path

from trustrank.lib.env import envbool, envstr

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(envstr("TRUSTRANK_VAR_DIR", str(BASE_DIR / "var")))
TESTING = "pytest" in sys.modules or envbool("TRUSTRANK_TESTING", False)
