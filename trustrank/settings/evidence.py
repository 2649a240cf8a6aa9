"""Settings of the evidence TrustRank reads and ranks: traces, identities, vulnerability
feeds, the ranking, cluster and GPU telemetry. Read by `trustrank.settings`, whose names
(paths, the beat schedule) they use."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from trustrank.lib.env import envbool, envfloat, envint, envstr
from trustrank.settings import CELERY_BEAT_SCHEDULE, STATICFILES_DIRS
from trustrank.settings.site import BASE_DIR

# --- Runtime evidence (OTLP traces) ---------------------------------------------------------
# Width of the time buckets call counts, latency histograms and library use are kept in.
TRUSTRANK_TRACE_BUCKET_SECONDS = envint("TRUSTRANK_TRACE_BUCKET_SECONDS", 60, minimum=1)
# How long the service map's busiest calls are kept at most (trustrank/runtime/map_edges.py):
# a written call edge row makes a new map at once; this bounds how long a kept map can miss
# a row committed after a later one. 0 computes the map on every view.
TRUSTRANK_SERVICE_MAP_KEEP_SECONDS = envint("TRUSTRANK_SERVICE_MAP_KEEP_SECONDS", 60, minimum=0)
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
# with every run, so an old rank can be reproduced. risk-3: ties broken by the finding id as
# a number (risk-2: as a string); the same default as `RankSettings.version`.
TRUSTRANK_RANKING_WEIGHTS: dict[str, float] = {}
TRUSTRANK_RANKING_WEIGHTS_VERSION = envstr("TRUSTRANK_RANKING_WEIGHTS_VERSION", "risk-3")
# EPSS probability from which exploitation counts as "public PoC".
TRUSTRANK_RANKING_EPSS_POC_THRESHOLD = envfloat("TRUSTRANK_RANKING_EPSS_POC_THRESHOLD", 0.1)
# Telemetry (calls, library use) older than this does not count.
TRUSTRANK_RANKING_WINDOW_MINUTES = envint("TRUSTRANK_RANKING_WINDOW_MINUTES", 1440, minimum=1)
# A ranking run that gives at least this many findings their first due date inserts them on
# a second database connection while it stores the queue (a team's first run).
TRUSTRANK_RANKING_DUE_THREAD_ABOVE = envint(
    "TRUSTRANK_RANKING_DUE_THREAD_ABOVE", 50_000, minimum=1
)
# A full ranking run over at least this many findings stores its contexts and per-service
# results on a second database connection while it stores the queue.
TRUSTRANK_RANKING_SIDE_WRITES_ABOVE = envint(
    "TRUSTRANK_RANKING_SIDE_WRITES_ABOVE", 50_000, minimum=1
)
# A ranking run that rewrites a team's queue of at least this many rows copies it into a
# table of its own, indexes it after and swaps it in as the team's partition of the ranked
# rows (trustrank/ranking/services/store_table.py): PostgreSQL then builds each index once
# instead of inserting every row into four.
TRUSTRANK_RANKING_OWN_TABLE_ABOVE = envint(
    "TRUSTRANK_RANKING_OWN_TABLE_ABOVE", 250_000, minimum=1
)
# An incremental ranking run that would rescore more than this many findings, and more
# than a quarter of the team's queue, ranks afresh as a full run instead (scored by
# columns: faster, and without the previous queue held beside the new one).
TRUSTRANK_RANKING_RESCORE_ABOVE = envint(
    "TRUSTRANK_RANKING_RESCORE_ABOVE", 100_000, minimum=0
)
# PostgreSQL's memory for each of those index builds (maintenance_work_mem), in MB.
TRUSTRANK_RANKING_INDEX_MEMORY_MB = envint(
    "TRUSTRANK_RANKING_INDEX_MEMORY_MB", 512, minimum=1
)
# How long the swap waits for the team's readers of its old table to finish.
TRUSTRANK_RANKING_SWAP_LOCK_SECONDS = envint(
    "TRUSTRANK_RANKING_SWAP_LOCK_SECONDS", 30, minimum=1
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

