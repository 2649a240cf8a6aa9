"""Writes for vulnerability intelligence: feed imports (feeds.py), matching and triage
(findings.py), audit events (audit.py)."""
