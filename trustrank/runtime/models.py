"""Runtime evidence from traces: environments, services, observed calls and library use.

Raw spans are not kept: an export request is folded into per-minute aggregates
(`CallEdgeBucket`, `LibraryBucket`). Two short-lived tables (`PendingServerSpan`,
`OpenClientSpan`) hold the one half of a cross-service call whose other half has not arrived
yet (each service exports its own spans, so caller and callee usually arrive in different
requests); the sweep settles what is still unmatched after TRUSTRANK_TRACE_MATCH_SECONDS.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F
from django.db.models.functions import Lower

# A service's or deployment's next revision (migration runtime.0010, `runtime.revisions`).
RANKED_REVISION_NEXT = models.Func(models.Value("runtime_ranked_revision"), function="nextval",
                                   output_field=models.BigIntegerField())


class Environment(models.Model):
    """A deployment environment (`deployment.environment[.name]`) of one team."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="environments")
    name = models.CharField(max_length=120)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="runtime_env_team_name_unique")
        ]

    def __str__(self) -> str:
        return self.name


class NodeKind(models.TextChoices):
    SERVICE = "service", "Service (sends telemetry)"
    EXTERNAL = "external", "External peer (no telemetry)"
    INTERNET = "internet", "Internet"


class IngressSetVia(models.TextChoices):
    PAGE = "page", "the service page"
    API = "api", "API"


class Service(models.Model):
    """A node of the call graph: a traced service, an external peer named by its callers,
    or the environment's `internet` node."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="services")
    kind = models.CharField(max_length=16, choices=NodeKind.choices, default=NodeKind.SERVICE)
    namespace = models.CharField(max_length=120, blank=True)
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=120, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    # Seen receiving a server span with no parent (or an unknown remote one).
    ingress_candidate = models.BooleanField(default=False)
    # An operator's word beats the evidence: True = confirmed, False = not ingress.
    ingress_override = models.BooleanField(null=True, blank=True)
    ingress_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    ingress_set_at = models.DateTimeField(null=True, blank=True)
    # Who set the override, for explanations (a person or an API key: the key has no user),
    # and through what: IngressSetVia.
    ingress_set_by_label = models.CharField(max_length=160, blank=True, db_default="")
    ingress_set_via = models.CharField(max_length=8, blank=True, db_default="")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    # Moved by a trigger on every change of a column a ranking run reads (migration
    # runtime.0010; `runtime.revisions`). NULL on rows unchanged since that migration.
    ranked_revision = models.BigIntegerField(db_default=RANKED_REVISION_NEXT, editable=False,
                                             null=True)

    class Meta:
        ordering = ["kind", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "kind", "namespace", "name"],
                name="runtime_service_node_unique",
            )
        ]
        indexes = [
            # A service by its name whatever its namespace, as the ranking keys services:
            # whether a declared deployment's service is traced (`declared_untraced_...`).
            # Through the unique index above, that walked every namespace's services: at
            # 100,000 services, 32 s for the list of 20,000 deployments.
            models.Index(fields=["environment", "kind", "name"], name="runtime_service_env_name"),
            # A peer name as a trace job looks it up (`_known_peers`): the few peers its
            # spans name, whatever the size of the team's graph.
            models.Index(F("environment"), Lower("name"), name="runtime_service_env_lower_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def is_ingress(self) -> bool:
        if self.ingress_override is not None:
            return self.ingress_override
        return self.ingress_candidate

    @property
    def display_name(self) -> str:
        return str(self)


class ServiceAlias(models.Model):
    """A peer name callers use for a traced service (`cart:7070` for `cartservice`), learnt
    when a client span is matched with the server span it caused."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="aliases")
    peer = models.CharField(max_length=200)
    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="aliases")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["environment", "peer"], name="runtime_alias_unique")
        ]

    def __str__(self) -> str:
        return f"{self.peer} -> {self.service_id}"


class CallEdgeBucket(models.Model):
    """Calls from one node to another in one time bucket, or part of them: each load
    appends its own row per (caller, callee, bucket) and readers add the rows of a bucket
    up (sums, the latest `last_seen`, histograms added bucket by bucket);
    `services.compaction.call_graph_compact` folds a finished bucket's rows into one.
    `hist` is the mergeable latency histogram (see engine_histograms.hist_index); trailing zero
    buckets are trimmed."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="+")
    caller = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="out_buckets")
    callee = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="in_buckets")
    bucket_start = models.DateTimeField()
    calls = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    tls_calls = models.BigIntegerField(default=0)
    mtls_calls = models.BigIntegerField(default=0)
    hist = ArrayField(models.BigIntegerField(), default=list)
    last_seen = models.DateTimeField()
    # When the row was written, by PostgreSQL's clock at the insert (not the transaction's
    # start): a ranking run re-reads only the edges with rows written since its previous
    # read (`ranking.inputs.edges`). NULL for rows written before the column.
    written_at = models.DateTimeField(
        null=True, editable=False,
        db_default=models.Func(function="clock_timestamp", output_field=models.DateTimeField()),
    )

    class Meta:
        indexes = [
            models.Index(fields=["caller", "callee", "bucket_start"], name="runtime_edge_bucket"),
            models.Index(fields=["environment", "written_at"], name="runtime_edge_env_written"),
            models.Index(fields=["environment", "bucket_start"], name="runtime_edge_env_bucket"),
            models.Index(fields=["callee", "bucket_start"], name="runtime_edge_callee_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.caller_id} -> {self.callee_id} at {self.bucket_start:%Y-%m-%d %H:%M}"


class LibraryKind(models.TextChoices):
    SCOPE = "scope", "Instrumentation scope"
    CODE = "code", "Code namespace"
    DB = "db", "Database system"
    MESSAGING = "messaging", "Messaging system"
    RPC = "rpc", "RPC system"
    # Library frames of `exception.stacktrace` in span events (trustrank.parsers.stackframes).
    JAVA_FRAME = "java_frame", "Java stack frame"
    PYTHON_FRAME = "python_frame", "Python stack frame"
    JS_FRAME = "js_frame", "JavaScript stack frame"
    # Not a library: root server spans from loopback ("local") or private ("internal")
    # callers, counted per minute beside the libraries (the ranking's exposure reads them).
    ORIGIN = "origin", "Root spans from local or internal callers"


class LibraryBucket(models.Model):
    """How many spans of a service named a library (scope, code namespace, db/messaging/rpc
    system, a library frame of an exception's stack trace) in one time bucket: the
    reachability evidence. Partial, as CallEdgeBucket: readers sum a bucket's rows."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="library_buckets")
    bucket_start = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=LibraryKind.choices)
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=120, blank=True)
    spans = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(
                fields=["service", "bucket_start", "kind", "name", "version"],
                name="runtime_library_bucket",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {self.version}".strip()


class PendingServerSpan(models.Model):
    """A server/consumer span whose parent was not in its export request: waits for the
    caller's client span. No foreign key constraints: a high-volume, short-lived index."""

    environment = models.ForeignKey(
        Environment, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    service = models.ForeignKey(
        Service, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    parent_span_id = models.BigIntegerField()
    bucket_start = models.DateTimeField()
    duration_us = models.BigIntegerField()
    error = models.BooleanField(default=False)
    tls = models.BooleanField(default=False)
    mtls = models.BooleanField(default=False)
    end_at = models.DateTimeField()
    trace_id = models.CharField(max_length=32)
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [
            models.Index(fields=["environment", "parent_span_id"], name="runtime_pending_parent")
        ]

    def __str__(self) -> str:
        return f"pending server span of {self.service_id} (parent {self.parent_span_id})"


class OpenClientSpan(models.Model):
    """A client/producer span whose server span was not in its export request: waits for it.
    If none comes, the sweep counts the call to an external node named by its peer, or, when
    the peer is a traced service that started new traces meanwhile, as lost trace context."""

    environment = models.ForeignKey(
        Environment, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    service = models.ForeignKey(
        Service, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    span_id = models.BigIntegerField()
    peer = models.CharField(max_length=200, blank=True)
    target = models.ForeignKey(
        Service, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    bucket_start = models.DateTimeField()
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    duration_us = models.BigIntegerField()
    error = models.BooleanField(default=False)
    tls = models.BooleanField(default=False)
    mtls = models.BooleanField(default=False)
    trace_id = models.CharField(max_length=32)
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["environment", "span_id"], name="runtime_open_span")]

    def __str__(self) -> str:
        return f"open client span {self.span_id} of {self.service_id}"


class TraceSample(models.Model):
    """The spans of a sampled trace from one export request, kept for drill-down until
    TRUSTRANK_TRACE_SAMPLE_RETENTION_DAYS (sampled by trace id, so every service's part of
    a sampled trace is kept)."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)
    spans = models.JSONField(default=list)
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["environment", "trace_id"], name="runtime_sample_trace")]

    def __str__(self) -> str:
        return f"trace {self.trace_id}"


class HumanImpact(models.TextChoices):
    """SSVC Human Impact of a service (the deployer's Mission and Well-being combined)."""

    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"
    VERY_HIGH = "very high", "Very high"


class DeploymentSource(models.TextChoices):
    SBOM = "sbom", "SBOM upload named the service"
    API = "api", "Set through the API"
    TELEMETRY = "telemetry", "service.name and service.version matched one project version"
    MANUAL = "manual", "Set by a person on the service page"


class Deployment(models.Model):
    """Which project version a service runs in an environment, and how much harm its
    compromise would do (SSVC Human Impact). Keyed by names, not by a Service row: a pipeline
    may declare a deployment before the service sends its first trace."""

    environment = models.ForeignKey(
        Environment, on_delete=models.CASCADE, related_name="deployments"
    )
    namespace = models.CharField(max_length=120, blank=True)
    service_name = models.CharField(max_length=200)
    project_version = models.ForeignKey(
        "inventory.ProjectVersion", on_delete=models.CASCADE, related_name="deployments"
    )
    human_impact = models.CharField(
        max_length=12, choices=HumanImpact.choices, default=HumanImpact.MEDIUM
    )
    source = models.CharField(max_length=12, choices=DeploymentSource.choices)
    set_by = models.CharField(max_length=160, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The operator's ingress mark for a declared service that sends no traces (there is no
    # Service row to hold it; `runtime.services.ingress`). Once traces arrive it still
    # counts until the Service row is marked itself.
    ingress_override = models.BooleanField(null=True, blank=True)
    ingress_set_by_label = models.CharField(max_length=160, blank=True, db_default="")
    ingress_set_via = models.CharField(max_length=8, blank=True, db_default="")
    ingress_set_at = models.DateTimeField(null=True, blank=True)
    # Moved by a trigger on every change of a column a ranking run reads (migration
    # runtime.0010; `runtime.revisions`). NULL on rows unchanged since that migration.
    ranked_revision = models.BigIntegerField(db_default=RANKED_REVISION_NEXT, editable=False,
                                             null=True)

    class Meta:
        ordering = ["environment", "namespace", "service_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "namespace", "service_name"],
                name="runtime_deployment_service_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.service_name} runs {self.project_version_id}"
