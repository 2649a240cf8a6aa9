"""Writes for vulnerability intelligence: feed imports (feeds.py), matching components to
advisories (matching.py, with what a match writes on its finding in reasons.py), and
re-matching and exploit data after a feed import (exploit.py)."""
