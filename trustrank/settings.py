"""TrustRank settings: one module, driven by environment variables (see README)."""

from __future__ import annotations

import os
import re
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from trustrank.lib.embedded import embedded_database_settings, filesystem_broker
from trustrank.lib.env import envbool, envfloat, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("TRUSTRANK_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", False)
TESTING = "pytest" in sys.modules or envbool("TRUSTRANK_TESTING", False)

SECRET_KEY = envstr("SECRET_KEY")
EMBEDDED = not envstr("DATABASE_URL")
if not SECRET_KEY:
    # Production (an external DATABASE_URL) must bring its own key.
    if not (DEBUG or TESTING or EMBEDDED):
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set in production")
    # Demo and tests: a per-machine random key kept under var/, never in the repository.
    _key_file = VAR_DIR / "secret_key"
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    if not _key_file.exists():
        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # Django's admin, on a site whose sign-in is throttled like the site's.
    "trustrank.accounts.admin_apps.TrustRankAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "trustrank.accounts",
    "trustrank.jobs",
    "trustrank.inventory",
    "trustrank.vulns",
    "trustrank.runtime",
    "trustrank.identity",
    "trustrank.findings",
    "trustrank.ranking",
    "trustrank.cluster",
    "trustrank.exports",
    "trustrank.gate",
    "trustrank.jira",
    "trustrank.notify",
    "ingest",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "trustrank.lib.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "trustrank.lib.middleware.BodySizeLimitMiddleware",
    "trustrank.lib.middleware.InputCheckMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "trustrank.urls"
WSGI_APPLICATION = "trustrank.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # |http_url, for every template: reference URLs become links only for http(s).
            "builtins": ["trustrank.lib.templatefilters"],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL")
_CONN_MAX_AGE = envint("DB_CONN_MAX_AGE", 60, minimum=0)
DATABASES: dict[str, dict[str, Any]] = {
    "default": (
        dict(dj_database_url.parse(DATABASE_URL, conn_max_age=_CONN_MAX_AGE))
        if DATABASE_URL
        # Started by the first connection, not here (see trustrank/lib/embedded_pg).
        else embedded_database_settings(VAR_DIR, conn_max_age=_CONN_MAX_AGE)
    ),
}
if envstr("TRUSTRANK_DB_NAME"):
    # Lets a worker or server process started by the tests use the test database.
    DATABASES["default"]["NAME"] = envstr("TRUSTRANK_DB_NAME")
DATABASES["default"].setdefault("OPTIONS", {})
if TESTING:
    # The test suite empties every table between transactional tests, the append-only audit
    # table included; its trigger lets a TRUNCATE through only for sessions that say so.
    DATABASES["default"]["OPTIONS"]["options"] = "-c trustrank.allow_audit_truncate=on"
DATABASES["default"]["TEST"] = {"NAME": envstr("TRUSTRANK_TEST_DB_NAME", "test_trustrank")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"
if TESTING:
    # Password hashing dominates test run time otherwise.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Sign-in throttling: after this many failures for one account, or from one address, within
# the window, further attempts are refused (without checking the password) until the oldest
# of them leaves the window.
TRUSTRANK_LOGIN_WINDOW_SECONDS = envint("TRUSTRANK_LOGIN_WINDOW_SECONDS", 900, minimum=1)
TRUSTRANK_LOGIN_MAX_PER_ACCOUNT = envint("TRUSTRANK_LOGIN_MAX_PER_ACCOUNT", 5, minimum=1)
TRUSTRANK_LOGIN_MAX_PER_ADDRESS = envint("TRUSTRANK_LOGIN_MAX_PER_ADDRESS", 30, minimum=1)

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG and not TESTING)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# HSTS on every HTTPS response once the site is served over HTTPS (secure cookies say so).
# Behind a TLS-terminating proxy, SECURE_PROXY_SSL_HEADER=true trusts its X-Forwarded-Proto.
SECURE_HSTS_SECONDS = envint(
    "SECURE_HSTS_SECONDS", 31_536_000 if SESSION_COOKIE_SECURE else 0, minimum=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
if envbool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Every page: scripts only from this origin and never inline (static/js holds what templates
# used to inline); inline styles stay allowed (htmx inserts its indicator style).
TRUSTRANK_CSP = envstr(
    "TRUSTRANK_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(envstr("TRUSTRANK_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS: list[Path | tuple[str, Path]] = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if TESTING
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG or TESTING

# --- Uploads --------------------------------------------------------------------------------
# The one size limit for every ingest body (after decompression too). No separate cap on
# PUT /api/v1/bom as Dependency-Track has.
TRUSTRANK_MAX_UPLOAD_BYTES = envint("TRUSTRANK_MAX_UPLOAD_BYTES", 256 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = TRUSTRANK_MAX_UPLOAD_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "trustrank.accounts.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["trustrank.accounts.auth.HasScope"],
    "DEFAULT_PAGINATION_CLASS": "trustrank.lib.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["trustrank.lib.filters.StrictFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "trustrank.lib.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "TrustRank API",
    "DESCRIPTION": "Trust-based risk prioritization: ingest evidence, read ranked findings.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its UI are for signed-in people and keys with the read scope.
    "SERVE_PERMISSIONS": ["trustrank.accounts.auth.HasScope"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The default hook, then the plain-Django receivers (/v1/traces, /v1/metrics, /api/v1/write).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ingest.apis.schema.plain_receivers_document",
    ],
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if not CELERY_BROKER_URL:
    # Files under var/, written and claimed atomically (trustrank/lib/file_broker.py): kombu's
    # own filesystem transport lets a worker read a message still being written.
    CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(VAR_DIR)
    CELERY_BROKER_TRANSPORT = "trustrank.lib.file_broker:Transport"
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # "priority": the worker always drains the first queue it lists (the high-priority one)
    # before the next, instead of round-robin.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "queue_order_strategy": "priority",
        "visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=10),
    }
QUEUE_PREFIX = envstr("TRUSTRANK_QUEUE_PREFIX", "")
INGEST_QUEUE = f"{QUEUE_PREFIX}ingest"
INGEST_HIGH_QUEUE = f"{QUEUE_PREFIX}ingest_high"
# Batch work (replay runs, large exports, periodic full re-ranks) has a queue of its own,
# listed last by every worker: interactive work goes first.
BATCH_QUEUE = f"{QUEUE_PREFIX}batch"
CELERY_TASK_DEFAULT_QUEUE = INGEST_QUEUE
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "jobs-sweep": {
        "task": "trustrank.jobs.tasks.jobs_sweep",
        "schedule": timedelta(seconds=envint("TRUSTRANK_SWEEP_SECONDS", 60, minimum=1)),
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Ingest ---------------------------------------------------------------------------------
# A running job whose lease is older than this is presumed dead (worker killed) and re-queued.
TRUSTRANK_JOB_LEASE_SECONDS = envint("TRUSTRANK_JOB_LEASE_SECONDS", 300, minimum=1)
# How often a running job renews its lease and publishes its progress (at most a quarter of
# the lease).
TRUSTRANK_JOB_HEARTBEAT_SECONDS = envfloat("TRUSTRANK_JOB_HEARTBEAT_SECONDS", 2.0)
# A queued job not picked up for this long is enqueued again (a lost broker message).
TRUSTRANK_JOB_REQUEUE_SECONDS = envint("TRUSTRANK_JOB_REQUEUE_SECONDS", 300, minimum=1)
TRUSTRANK_JOB_MAX_ATTEMPTS = envint("TRUSTRANK_JOB_MAX_ATTEMPTS", 5, minimum=1)
# A job's database session: no statement runs longer, no lock is waited for longer (a lock
# timeout is a transient error: the job is tried again with back-off).
TRUSTRANK_JOB_STATEMENT_TIMEOUT_SECONDS = envint(
    "TRUSTRANK_JOB_STATEMENT_TIMEOUT_SECONDS", 900, minimum=1
)
TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS = envint("TRUSTRANK_JOB_LOCK_TIMEOUT_SECONDS", 120, minimum=1)
# Batch jobs run in at most this many slots at once (site-wide) and per team: keep it below
# the number of worker processes so interactive work always finds a free worker.
# Tests only: each progress report of a job sleeps this long, so a test can kill a worker in
# the middle of any kind of job.
TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS = (
    envfloat("TRUSTRANK_JOB_TEST_SLOW_PROGRESS_SECONDS", 0.0) if TESTING else 0.0
)
TRUSTRANK_JOBS_BATCH_SLOTS = envint("TRUSTRANK_JOBS_BATCH_SLOTS", 1, minimum=1)
TRUSTRANK_JOBS_BATCH_SLOTS_PER_TEAM = envint("TRUSTRANK_JOBS_BATCH_SLOTS_PER_TEAM", 1, minimum=1)
# Queued jobs of a costly kind one team may have; one more is answered 429 with Retry-After.
TRUSTRANK_JOBS_QUEUED_MAX_PER_TEAM: dict[str, int] = {
    "replay_run": envint("TRUSTRANK_JOBS_QUEUED_MAX_REPLAY", 10, minimum=1),
    "export": envint("TRUSTRANK_JOBS_QUEUED_MAX_EXPORT", 10, minimum=1),
    "bulk_triage": envint("TRUSTRANK_JOBS_QUEUED_MAX_BULK_TRIAGE", 10, minimum=1),
}
# Formula 6 of the design: Retry-After = base * (1 + 0.02 q)^2 once the queue passes this depth.
TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT = envint("TRUSTRANK_INGEST_QUEUE_SOFT_LIMIT", 1000, minimum=1)
TRUSTRANK_BACKOFF_BASE_SECONDS = envfloat("TRUSTRANK_BACKOFF_BASE_SECONDS", 0.010)
TRUSTRANK_DEFAULT_PRIORITY = 10

# --- Runtime evidence (OTLP traces) ---------------------------------------------------------
# Width of the time buckets call counts, latency histograms and library use are kept in.
TRUSTRANK_TRACE_BUCKET_SECONDS = envint("TRUSTRANK_TRACE_BUCKET_SECONDS", 60, minimum=1)
# How long one half of a cross-service call (arriving in another export request than the
# other half) waits to be matched before the sweep settles it.
TRUSTRANK_TRACE_MATCH_SECONDS = envint("TRUSTRANK_TRACE_MATCH_SECONDS", 120, minimum=1)
# Share of traces (by trace id) whose raw spans are kept for drill-down, and for how long.
TRUSTRANK_TRACE_SAMPLE_RATE = envfloat("TRUSTRANK_TRACE_SAMPLE_RATE", 0.01)
TRUSTRANK_TRACE_SAMPLE_RETENTION_DAYS = envint(
    "TRUSTRANK_TRACE_SAMPLE_RETENTION_DAYS", 7, minimum=0
)
# Spans ending more than this after the export arrived, or starting more than
# TRUSTRANK_TRACE_MAX_AGE_DAYS before it, are rejected (counted in partial_success): a clock
# far off, or a timestamp of 2^64-1, would otherwise set a service's last-seen to year 2554.
TRUSTRANK_TRACE_MAX_FUTURE_SECONDS = envint("TRUSTRANK_TRACE_MAX_FUTURE_SECONDS", 86400, minimum=0)
TRUSTRANK_TRACE_MAX_AGE_DAYS = envint("TRUSTRANK_TRACE_MAX_AGE_DAYS", 7300, minimum=1)
# Keep the raw export body on the job after it was aggregated (off: aggregates only).
# A lost-trace-context finding with no new sighting for this long resolves itself.
TRUSTRANK_TRACE_BROKEN_CONTEXT_RESOLVE_HOURS = envint(
    "TRUSTRANK_TRACE_BROKEN_CONTEXT_RESOLVE_HOURS", 24, minimum=1
)
TRUSTRANK_TRACE_KEEP_PAYLOAD = envbool("TRUSTRANK_TRACE_KEEP_PAYLOAD", False)
# A large export is decoded and aggregated in parts of about this size (bounded memory).
TRUSTRANK_TRACE_PART_BYTES = envint("TRUSTRANK_TRACE_PART_BYTES", 4 * 1024 * 1024, minimum=1024)
# Stack frames of span `exception` events read as library evidence: at most this many
# frames from the top of each stack trace, and this many distinct frames per span.
TRUSTRANK_TRACE_STACK_FRAMES = envint("TRUSTRANK_TRACE_STACK_FRAMES", 20, minimum=0)
TRUSTRANK_TRACE_SPAN_FRAMES = envint("TRUSTRANK_TRACE_SPAN_FRAMES", 40, minimum=0)
# Receivers re-read the ingest queue depth (a COUNT) at most this often per process.
TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS = envfloat(
    "TRUSTRANK_INGEST_OVERLOAD_CACHE_SECONDS", 1.0
)
# The telemetry receivers (/v1/metrics, /v1/traces, /api/v1/write) trust an API key found
# good for this many seconds per process without looking it up again: a key revoked
# elsewhere is refused by every process within this time. 0 looks every request up.
TRUSTRANK_API_KEY_CACHE_SECONDS = envfloat("TRUSTRANK_API_KEY_CACHE_SECONDS", 5.0)
CELERY_BEAT_SCHEDULE["runtime-traces-sweep"] = {
    "task": "trustrank.runtime.tasks.runtime_traces_sweep",
    "schedule": timedelta(seconds=envint("TRUSTRANK_TRACE_SWEEP_SECONDS", 30, minimum=1)),
}
# The service map's graph library (cytoscape) comes from npm (`npm ci`), never from git.
_CYTOSCAPE_DIST = BASE_DIR / "node_modules" / "cytoscape" / "dist"
if _CYTOSCAPE_DIST.is_dir():
    STATICFILES_DIRS.append(("vendor/cytoscape", _CYTOSCAPE_DIST))

# --- Identity evidence (docs/identity.md) ----------------------------------------------------
# Overrides of trustrank.identity.engine.StrengthRules fields, e.g. {"weak_key_penalty": 50}.
TRUSTRANK_IDENTITY_STRENGTH: dict[str, object] = {}
# Regexes over the SPIFFE ID path with a (?P<service>…) and optional (?P<namespace>…) group;
# None = the defaults (/ns/<ns>/sa/<sa>, else the last path segment). Paths matching an
# exclude pattern are never mapped (default: SPIRE's own /spire/… IDs).
TRUSTRANK_IDENTITY_MAPPING_RULES: list[str] | None = None
TRUSTRANK_IDENTITY_MAPPING_EXCLUDE: list[str] | None = None
# Optional "dotted.path(team_id, environment) -> [(service, namespace), …]": when set, a rule
# maps an identity only to a service the catalog knows.
TRUSTRANK_IDENTITY_SERVICE_CATALOG = envstr("TRUSTRANK_IDENTITY_SERVICE_CATALOG", "")
TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS = envint(
    "TRUSTRANK_IDENTITY_EXPIRY_WINDOW_DAYS", 30, minimum=1
)
# An "expiring" finding needs less left than min(window, max(floor, fraction × lifetime))
# (the floor at most half the lifetime), and, when the identity's earlier certificates show
# a regular rotation (at least ROTATION_MIN_OBSERVED replaced before they expired), less
# than the share of lifetime they had left when replaced (identity/engine/expiry.py).
TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION = envfloat(
    "TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION", 1 / 3
)
TRUSTRANK_IDENTITY_EXPIRY_FLOOR_HOURS = envint(
    "TRUSTRANK_IDENTITY_EXPIRY_FLOOR_HOURS", 24, minimum=0
)
TRUSTRANK_IDENTITY_ROTATION_MIN_OBSERVED = envint(
    "TRUSTRANK_IDENTITY_ROTATION_MIN_OBSERVED", 2, minimum=1
)
if not 0 < TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION <= 1:
    raise ImproperlyConfigured("TRUSTRANK_IDENTITY_EXPIRY_LIFETIME_FRACTION must be in (0, 1]")
# Caller policies are checked against the calls observed over this window, this often.
TRUSTRANK_IDENTITY_POLICY_WINDOW_SECONDS = envint(
    "TRUSTRANK_IDENTITY_POLICY_WINDOW_SECONDS", 900, minimum=60
)
# A certificate upload with more PEM blocks than this is parsed by the worker instead of the
# request (the receiver then checks only its structure and refuses private keys).
TRUSTRANK_CERTS_INLINE_PARSE_MAX = envint("TRUSTRANK_CERTS_INLINE_PARSE_MAX", 1000, minimum=0)
CELERY_BEAT_SCHEDULE["identity-policies-check"] = {
    "task": "trustrank.identity.tasks.identity_policies_check",
    "schedule": timedelta(
        seconds=envint("TRUSTRANK_IDENTITY_POLICY_CHECK_SECONDS", 300, minimum=10)
    ),
}
CELERY_BEAT_SCHEDULE["identity-reevaluate"] = {
    "task": "trustrank.identity.tasks.identity_reevaluate",
    "schedule": timedelta(hours=envint("TRUSTRANK_IDENTITY_REEVALUATE_HOURS", 6, minimum=1)),
}

# --- Vulnerability feeds ---------------------------------------------------------------------
# Where scheduled imports read each feed: an http(s) URL or a local path (file, directory or
# zip). Empty = no schedule for that feed (the default: feeds are imported on demand).
TRUSTRANK_FEED_SOURCES = {
    "osv": envstr("TRUSTRANK_FEED_OSV_SOURCE"),
    "kev": envstr("TRUSTRANK_FEED_KEV_SOURCE"),
    "epss": envstr("TRUSTRANK_FEED_EPSS_SOURCE"),
    # One NVD CVE API 2.0 page: a yearly feed file (path or URL) or an API URL.
    "nvd": envstr("TRUSTRANK_FEED_NVD_SOURCE"),
}
# Feed records dated later than now plus this are refused (OSV modified/published, a KEV
# catalog's version or release date, an EPSS score date): a future date would win over every
# genuine update after it.
TRUSTRANK_FEED_MAX_CLOCK_SKEW_SECONDS = envint(
    "TRUSTRANK_FEED_MAX_CLOCK_SKEW_SECONDS", 3600, minimum=0
)
# A KEV catalog that would remove more than this share of the stored entries at once is
# refused unless the import says --allow-shrink.
TRUSTRANK_FEED_KEV_MAX_SHRINK = envfloat("TRUSTRANK_FEED_KEV_MAX_SHRINK", 0.5)
# The team that owns imports started by the command line or the schedule (created on demand).
TRUSTRANK_FEEDS_TEAM = envstr("TRUSTRANK_FEEDS_TEAM", "feeds")
for _feed, _source in TRUSTRANK_FEED_SOURCES.items():
    if _source:
        CELERY_BEAT_SCHEDULE[f"vulns-feed-{_feed}"] = {
            "task": "ingest.tasks.ingest_feed_import_scheduled",
            "schedule": timedelta(hours=envint("TRUSTRANK_FEED_INTERVAL_HOURS", 24, minimum=1)),
            "args": [_feed],
        }

# --- Contextual ranking (docs/ranking.md) ----------------------------------------------------
# Points each factor can move a score away from 50 (trustrank.risk.inputs.ScoreWeights;
# they should sum to 100). Change TRUSTRANK_RANKING_WEIGHTS_VERSION with them: it is stored
# with every run, so an old rank can be reproduced.
TRUSTRANK_RANKING_WEIGHTS: dict[str, float] = {}
TRUSTRANK_RANKING_WEIGHTS_VERSION = envstr("TRUSTRANK_RANKING_WEIGHTS_VERSION", "risk-2")
# EPSS probability from which exploitation counts as "public PoC".
TRUSTRANK_RANKING_EPSS_POC_THRESHOLD = envfloat("TRUSTRANK_RANKING_EPSS_POC_THRESHOLD", 0.1)
# Telemetry (calls, library use) older than this does not count.
TRUSTRANK_RANKING_WINDOW_MINUTES = envint("TRUSTRANK_RANKING_WINDOW_MINUTES", 1440, minimum=1)
# A ranking run that gives at least this many findings their first due date inserts them on
# a second database connection while it stores the queue (a team's first run).
TRUSTRANK_RANKING_DUE_THREAD_ABOVE = envint(
    "TRUSTRANK_RANKING_DUE_THREAD_ABOVE", 50_000, minimum=1
)
# A load (SBOM, traces, certificates, feeds) starts a ranking run this long after it; loads
# that follow within the delay share the run (see TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS).
TRUSTRANK_RANKING_DEBOUNCE_SECONDS = envint("TRUSTRANK_RANKING_DEBOUNCE_SECONDS", 60, minimum=0)
# A trace window (a traces job) is ranked after this much instead: ranks move within seconds
# of the traffic that moved them (a run is incremental, and windows arriving while one runs
# share the next).
TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS = envint(
    "TRUSTRANK_RANKING_TRACE_DEBOUNCE_SECONDS", 0, minimum=0
)
# Bulk triage of up to this many findings is applied within the request (200); more becomes a
# job run by the findings_bulk_triage task (202).
TRUSTRANK_BULK_TRIAGE_SYNC_MAX = envint("TRUSTRANK_BULK_TRIAGE_SYNC_MAX", 500, minimum=1)
# A VEX document (POST /api/v1/vex) of at most this many statements is applied within the
# request and answered with its counts; a bigger one is answered 202 and applied by a worker.
TRUSTRANK_VEX_SYNC_MAX_STATEMENTS = envint("TRUSTRANK_VEX_SYNC_MAX_STATEMENTS", 5000, minimum=0)
# Extra library-evidence rules (table, name, component key): see trustrank/risk/libraries.py.
TRUSTRANK_LIBRARY_MAP: list[tuple[str, str, str]] = []
# Evidence ages while nothing is uploaded (certificates expire, telemetry leaves the window):
# every team with findings is ranked again this often. Also re-sends lost run messages.
TRUSTRANK_RANKING_SWEEP_SECONDS = envint("TRUSTRANK_RANKING_SWEEP_SECONDS", 300, minimum=1)
CELERY_BEAT_SCHEDULE["ranking-runs-sweep"] = {
    "task": "trustrank.ranking.tasks.ranking_runs_sweep",
    "schedule": timedelta(seconds=TRUSTRANK_RANKING_SWEEP_SECONDS),
}
# Loads record that a team's evidence changed; beat turns the changes into debounced ranking
# runs this often. A run starts about TRUSTRANK_RANKING_DEBOUNCE_SECONDS after the team's
# first change, late by at most this much: keep it a few seconds (the sweep is one DELETE
# on a table that is empty most of the time).
TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS = envint(
    "TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS", 2, minimum=1
)
CELERY_BEAT_SCHEDULE["ranking-evidence-sweep"] = {
    "task": "trustrank.ranking.tasks.ranking_evidence_sweep",
    "schedule": timedelta(seconds=TRUSTRANK_RANKING_EVIDENCE_SWEEP_SECONDS),
}

# --- Cluster and GPU evidence (issue 11) ---------------------------------------------------
# Per-minute metric points are kept this many days; older day partitions are dropped whole.
TRUSTRANK_CLUSTER_RETENTION_DAYS = envint("TRUSTRANK_CLUSTER_RETENTION_DAYS", 14, minimum=1)
# A worker that takes a fresh OTLP metrics job waits up to this long (from the job's
# arrival) for more of the team's requests to store with it: a Collector sends a scrape of
# a large cluster in a burst of requests, and fewer, larger loads cost less a point and
# write fewer chunks (design formula 7: batching waits at most 100 ms; a job whose
# X-Priority is more urgent than the default does not wait). 0 turns the wait off.
TRUSTRANK_METRICS_BATCH_WAIT_MS = envint("TRUSTRANK_METRICS_BATCH_WAIT_MS", 100, minimum=0)
# Metric samples (OTLP, remote write, text scrapes) timed more than this after their
# arrival, or more than TRUSTRANK_METRICS_MAX_AGE_DAYS before it, are dropped and counted
# (partial success), not stored: a clock far off, or a timestamp of 2^63-1, would
# otherwise land in a day partition storage cannot make, or one retention drops at once.
TRUSTRANK_METRICS_MAX_FUTURE_SECONDS = envint(
    "TRUSTRANK_METRICS_MAX_FUTURE_SECONDS", 600, minimum=0
)
TRUSTRANK_METRICS_MAX_AGE_DAYS = envint(
    "TRUSTRANK_METRICS_MAX_AGE_DAYS", TRUSTRANK_CLUSTER_RETENTION_DAYS, minimum=1
)
# How far back the diagnoses read stored series (over-reserved needs an hour of samples).
TRUSTRANK_CLUSTER_DIAGNOSE_WINDOW_MINUTES = envint(
    "TRUSTRANK_CLUSTER_DIAGNOSE_WINDOW_MINUTES", 90, minimum=5
)
# A load asks for diagnoses of its cluster this long after it; loads within the delay share
# one run (a Prometheus remote-writes every few seconds).
TRUSTRANK_CLUSTER_DIAGNOSE_DEBOUNCE_SECONDS = envint(
    "TRUSTRANK_CLUSTER_DIAGNOSE_DEBOUNCE_SECONDS", 30, minimum=0
)
CELERY_BEAT_SCHEDULE["cluster-metrics-retention"] = {
    "task": "trustrank.cluster.tasks.cluster_metrics_retention",
    "schedule": timedelta(hours=envint("TRUSTRANK_CLUSTER_RETENTION_CHECK_HOURS", 6, minimum=1)),
}
# Diagnoses also age (a queue stops growing, utilisation leaves the window) without loads.
CELERY_BEAT_SCHEDULE["cluster-diagnose-all"] = {
    "task": "trustrank.cluster.tasks.clusters_diagnose",
    "schedule": timedelta(
        seconds=envint("TRUSTRANK_CLUSTER_DIAGNOSE_SECONDS", 600, minimum=10)
    ),
}

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
