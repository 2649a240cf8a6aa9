"""TrustRank settings, driven by environment variables (see README): the site, its apps,
database, auth, API, Celery and ingest here; the evidence and the outputs in the modules
imported at the end, which read the paths and the beat schedule defined here."""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from trustrank.lib.embedded import embedded_database_settings, filesystem_broker
from trustrank.lib.env import envbool, envfloat, envint, envlist, envstr
from trustrank.settings.site import BASE_DIR, TESTING, VAR_DIR

DEBUG = envbool("DEBUG", False)

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
# No JIT for the product's sessions: its statements are index reads of a page and batch
# writes, and PostgreSQL compiles any statement whose estimate passes `jit_above_cost`: at
# ten million findings, counting a page's ranks (a few ms of work, estimated at a third of
# a million) compiled for 76 ms a request; a ranking run's big statements and the finding
# groups' aggregate had each turned it off for themselves for the same reason.
_SESSION_OPTIONS = ["-c jit=off"]
if TESTING:
    # The test suite empties every table between transactional tests, the append-only audit
    # table included; its trigger lets a TRUNCATE through only for sessions that say so.
    _SESSION_OPTIONS.append("-c trustrank.allow_audit_truncate=on")
DATABASES["default"]["OPTIONS"]["options"] = " ".join(
    filter(None, [DATABASES["default"]["OPTIONS"].get("options", ""), *_SESSION_OPTIONS]))
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

# The sections that follow these names (they read BASE_DIR, VAR_DIR, TESTING and add to
# CELERY_BEAT_SCHEDULE and STATICFILES_DIRS).
from trustrank.settings.evidence import *  # noqa: E402, F403
from trustrank.settings.outputs import *  # noqa: E402, F403
