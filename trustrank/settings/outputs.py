"""Settings of what TrustRank gives back: exports, audit checkpoints, CSAF, the findings
list at scale and its caches, outbound notifications. Read by `trustrank.settings`."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from trustrank.lib.env import envbool, envfloat, envint, envstr
from trustrank.settings import CELERY_BEAT_SCHEDULE
from trustrank.settings.site import TESTING, VAR_DIR

# --- Exports (issue: triage at team scale, and what auditors take away) ----------------------
# Exports matching at most this many findings stream straight back; bigger ones run as a job
# (exports_run) that writes the file here.
TRUSTRANK_EXPORT_STREAM_MAX_ROWS = envint("TRUSTRANK_EXPORT_STREAM_MAX_ROWS", 20_000, minimum=0)
TRUSTRANK_EXPORT_DIR = Path(envstr("TRUSTRANK_EXPORT_DIR", str(VAR_DIR / "media" / "exports")))
# The printable report (HTML and PDF) lists at most this many findings; its counts cover all.
TRUSTRANK_EXPORT_REPORT_MAX_ROWS = envint("TRUSTRANK_EXPORT_REPORT_MAX_ROWS", 10_000, minimum=1)
# A PDF report of more findings than this is made by the export job (about 0.6 ms a finding),
# not in the request.
TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS = envint(
    "TRUSTRANK_EXPORT_PDF_STREAM_MAX_ROWS", 500, minimum=0
)

# --- Audit checkpoints (manage.py audit_checkpoint / audit_verify) -----------------------------
# The Ed25519 private key that signs checkpoints: PEM (PKCS#8) or base64 of its 32 raw bytes,
# in the variable or in the file _FILE names. Read only when a checkpoint is written (never at
# startup, never logged): only the host that runs audit_checkpoint needs it.
TRUSTRANK_AUDIT_SIGNING_KEY = os.environ.get("TRUSTRANK_AUDIT_SIGNING_KEY", "")
TRUSTRANK_AUDIT_SIGNING_KEY_FILE = os.environ.get("TRUSTRANK_AUDIT_SIGNING_KEY_FILE", "")
# The public key checkpoints must be signed with (PEM or base64 of its 32 raw bytes), where
# the private key is not at hand; by default the signing key's own public half.
TRUSTRANK_AUDIT_VERIFY_KEY = envstr("TRUSTRANK_AUDIT_VERIFY_KEY", "")

# --- CSAF exports -----------------------------------------------------------------------------
# Who publishes the CSAF VEX documents (document.publisher): the organisation's name, a URL it
# controls as its namespace, and its CSAF publisher category.
TRUSTRANK_CSAF_PUBLISHER_NAME = envstr("TRUSTRANK_CSAF_PUBLISHER_NAME", "TrustRank") or "TrustRank"
TRUSTRANK_CSAF_PUBLISHER_NAMESPACE = envstr(
    "TRUSTRANK_CSAF_PUBLISHER_NAMESPACE", "https://trustrank.invalid"
)
TRUSTRANK_CSAF_PUBLISHER_CATEGORY = envstr("TRUSTRANK_CSAF_PUBLISHER_CATEGORY", "user")
if TRUSTRANK_CSAF_PUBLISHER_CATEGORY not in (
    "coordinator", "discoverer", "other", "translator", "user", "vendor"
):
    raise ImproperlyConfigured(
        "TRUSTRANK_CSAF_PUBLISHER_CATEGORY must be one of coordinator, discoverer, other, "
        "translator, user, vendor"
    )
if not re.match(r"^[a-z][a-z0-9+.-]*://\S+$", TRUSTRANK_CSAF_PUBLISHER_NAMESPACE):
    raise ImproperlyConfigured(
        "TRUSTRANK_CSAF_PUBLISHER_NAMESPACE must be an absolute URL (https://example.com)"
    )

# --- Findings list at scale (trustrank/findings/paging.py) ------------------------------------
# A filter's total is kept under the team's findings generation (newest write, newest ranking
# run, the table's deletion counter) and dropped after this many seconds in any case.
TRUSTRANK_FINDINGS_COUNT_TTL = envint("TRUSTRANK_FINDINGS_COUNT_TTL", 3600, minimum=0)
# A list's total is counted exactly up to this many findings (a count of at most this many
# rows: 15–35 ms at 1M, paid once per filter and write); a larger list shows PostgreSQL's
# estimate, rounded to three digits (the API's `count_exact: false`, "about N" on the page):
# an exact count of ten million findings takes 2.6 s, and every write would ask for it again
# (findings/totals.py).
TRUSTRANK_FINDINGS_EXACT_COUNT_MAX = envint(
    "TRUSTRANK_FINDINGS_EXACT_COUNT_MAX", 100_000, minimum=0
)
# A missing total (or order head, or search) is computed by one web worker at a time; the
# others wait this long for its answer, then answer an estimate (or compute it themselves).
TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS = envfloat("TRUSTRANK_FINDINGS_COUNT_WAIT_SECONDS", 2.0)
# A page of finding groups is kept the same way (trustrank/findings/groups.py); it takes
# ~25 s at ten million findings, so the others wait up to this long for the one computing it
# before they compute it themselves.
TRUSTRANK_FINDINGS_GROUPS_WAIT_SECONDS = envfloat("TRUSTRANK_FINDINGS_GROUPS_WAIT_SECONDS",
                                                  60.0)
# A groups page that took this long or more is also kept in PostgreSQL; once the findings
# moved on, it is shown as it was (with when) while a job groups it again
# (trustrank/findings/group_kept.py). 0: every page waits for its aggregate.
TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS = envfloat(
    "TRUSTRANK_FINDINGS_GROUPS_REFRESH_ABOVE_SECONDS", 5.0)
# A kept groups page is grouped again no sooner than this after its last grouping: under
# traces that re-rank a large estate every few seconds, one regrouping a minute per viewed
# page, not one batch slot kept busy back to back.
TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS = envfloat(
    "TRUSTRANK_FINDINGS_GROUPS_REGROUP_EVERY_SECONDS", 60.0)
# How long a web request may spend on a groups page none is kept of: a page whose statement
# runs longer is cancelled and grouped by a job, and the request answered "being grouped"
# at once (a first view at ten million findings took 25-32 s, past what a browser or a
# proxy waits). 0: no limit.
TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS = envfloat(
    "TRUSTRANK_FINDINGS_GROUPS_REQUEST_SECONDS", 10.0)
# A list page's rows (the API's results, the page's table) may be kept under the same
# generation (trustrank/findings/list_cache.py) for this many seconds. Off (0) by default:
# what the generation does not follow (a renamed project, a new EPSS score, a deletion not
# yet counted) would show that much later; a site with many readers of the same lists may
# turn it on.
TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS = envint(
    "TRUSTRANK_FINDINGS_LIST_CACHE_SECONDS", 0, minimum=0
)
# What the totals (and nothing else yet) are kept in. "file": one directory every web worker
# of this host shares, so a total is counted once per host rather than once per process;
# "redis": one Redis every host shares (TRUSTRANK_CACHE_URL), counted once for the site;
# "locmem": per process (the tests' default: no state outlives a test database). Totals are
# keyed by the findings generation, so none of them can serve a stale total.
_CACHE_KIND = envstr("TRUSTRANK_CACHE", "locmem" if TESTING else "file")
if _CACHE_KIND not in ("file", "locmem", "redis"):
    raise ImproperlyConfigured("TRUSTRANK_CACHE must be 'file', 'locmem' or 'redis'")
_CACHE_URL = envstr("TRUSTRANK_CACHE_URL", "")
if _CACHE_KIND == "redis" and not _CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured("TRUSTRANK_CACHE=redis needs TRUSTRANK_CACHE_URL=redis://...")
_CACHE_BACKENDS: dict[str, dict[str, Any]] = {
    "file": {
        "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
        "LOCATION": str(VAR_DIR / "cache"),
        "OPTIONS": {"MAX_ENTRIES": 20_000},
    },
    "redis": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _CACHE_URL,
        "KEY_PREFIX": "trustrank",
    },
    "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
}
CACHES = {"default": _CACHE_BACKENDS[_CACHE_KIND]}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # pgserver logs every process exit at INFO (the embedded database; see lib/embedded.py).
    "loggers": {"django.db.backends": {"level": "WARNING"}, "pgserver": {"level": "WARNING"}},
}

# --- Outbound notifications (webhooks, Jira; trustrank/lib/outbound.py) ----------------------
# Webhook and Jira URLs may point at private, loopback and link-local addresses (an internal
# receiver, a Jira on the same private network). Off by default, so a team admin's URL cannot
# probe the site's own network.
TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = envbool("TRUSTRANK_OUTBOUND_ALLOW_PRIVATE", False)
# The CA certificates (a PEM file) https webhooks are verified against; certifi's by default.
TRUSTRANK_OUTBOUND_CA_BUNDLE = envstr("TRUSTRANK_OUTBOUND_CA_BUNDLE", "")
# The site's address as people reach it: the links in deliveries (finding pages).
TRUSTRANK_SITE_URL = envstr("TRUSTRANK_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
# A delivery that failed (network error, 5xx, 408, 429) is tried again after base · 2^(n−1)
# seconds (capped), up to this many attempts in all; other 4xx fail at once.
TRUSTRANK_WEBHOOK_MAX_ATTEMPTS = envint("TRUSTRANK_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS = envfloat("TRUSTRANK_WEBHOOK_RETRY_BASE_SECONDS", 10.0)
TRUSTRANK_WEBHOOK_RETRY_MAX_SECONDS = envfloat("TRUSTRANK_WEBHOOK_RETRY_MAX_SECONDS", 3600.0)
TRUSTRANK_WEBHOOK_TIMEOUT_SECONDS = envfloat("TRUSTRANK_WEBHOOK_TIMEOUT_SECONDS", 10.0)
# Deliveries a worker sends at once (threads over pooled keep-alive connections), and how many
# it claims per round trip to the database.
TRUSTRANK_WEBHOOK_CONCURRENCY = envint("TRUSTRANK_WEBHOOK_CONCURRENCY", 32, minimum=1)
TRUSTRANK_WEBHOOK_CHUNK = envint("TRUSTRANK_WEBHOOK_CHUNK", 256, minimum=1)
# Finished deliveries older than this are deleted (beat, every few hours).
TRUSTRANK_WEBHOOK_RETENTION_DAYS = envint("TRUSTRANK_WEBHOOK_RETENTION_DAYS", 30, minimum=1)
CELERY_BEAT_SCHEDULE["notify-retention"] = {
    "task": "trustrank.notify.tasks.notify_retention",
    "schedule": timedelta(hours=6),
}
