"""Scheduling replay runs: one row per run, the source of truth for its progress and result."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from trustrank.jobs.models import Job, JobClass, JobStatus


class ReplayMode(models.TextChoices):
    INFLATION = "inflation", "Inflation (FGD paper)"
    TIMELINE = "timeline", "Timeline (priority policies)"


# One status vocabulary for every kind of job (the name ReplayStatus is kept for readers).
ReplayStatus = JobStatus


class ReplayRun(Job):
    """A replay of a pod/node trace through placement strategies or priority policies.

    The uploaded CSVs are kept on the row (empty, and no cluster: the bundled openb trace) so
    the worker, a retry, or a re-run reads the very bytes that were validated when the run
    was made.
    The job kind "replay_run", batch work: the job runner claims it in a batch slot and
    renews its lease while it runs.
    """

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="replay_runs")
    mode = models.CharField(max_length=16, choices=ReplayMode.choices)
    job_class = models.CharField(max_length=12, choices=JobClass.choices, default=JobClass.BATCH)
    # JSON only: strategies, seeds, policies, placement, compress, node_fraction.
    parameters = models.JSONField(default=dict, blank=True)
    trace_label = models.CharField(max_length=255, blank=True)
    # Replay the team's own cluster as stored from its snapshots (instead of CSVs). The
    # worker reads the stored pods and nodes when it runs; a deleted cluster fails the run.
    cluster = models.ForeignKey(
        "Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="replay_runs"
    )
    pods_csv = models.BinaryField(null=True, blank=True)
    nodes_csv = models.BinaryField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["team", "-created_at"], name="replayrun_team_created")]

    def __str__(self) -> str:
        return f"replay run {self.pk} ({self.mode}, {self.status})"


# --- Cluster evidence (issue 11) -----------------------------------------------------------


class Cluster(models.Model):
    """A Kubernetes cluster of one team, named by the `k8s.cluster.name` resource attribute,
    a remote-write external label, or the URL. Created on first evidence."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="clusters")
    name = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)
    objects_at = models.DateTimeField(null=True, blank=True)
    metrics_at = models.DateTimeField(null=True, blank=True)
    diagnosed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="cluster_team_name"),
        ]

    def __str__(self) -> str:
        return self.name


class ClusterPod(models.Model):
    """The latest known state of a pod. `state` is the parser's `Pod` as JSON (see
    `services.objects.pod_from_state`) so diagnoses read exactly what was uploaded; the
    columns beside it are for listing and joining series by namespace/pod."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pods")
    key = models.CharField(max_length=300, help_text="uid, or namespace/name without one")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    node = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=20, blank=True)
    qos_class = models.CharField(max_length=20, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    gpus = models.FloatField(default=0)
    workload = models.CharField(max_length=600, blank=True)
    state = models.JSONField(default=dict)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="clusterpod_key")]
        indexes = [
            models.Index(fields=["cluster", "namespace", "name"], name="clusterpod_ns_name"),
            models.Index(fields=["cluster", "workload"], name="clusterpod_workload"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClusterNetworkObject(models.Model):
    """The latest uploaded routing object of a cluster: a Service, Ingress, Gateway or
    HTTPRoute. `state` is the parser's dataclass as JSON (`parsers.kubernetes_network`). A
    snapshot holding one of these kinds is the cluster's whole list of that kind."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="network")
    kind = models.CharField(max_length=16)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    state = models.JSONField(default=dict)
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["kind", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind", "namespace", "name"],
                                    name="clusternetobj_key"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class ClusterEntryPoint(models.Model):
    """A route from the internet into the cluster (`risk.cluster.entry_points`), recomputed
    from the stored routing objects and live pods after every objects upload. `names` are
    the service names traces may report for the pods reached; ranking makes a traced service
    with one of them (same cluster and namespace when its resource attributes say) an entry
    point, and `route` is what its exposure explanation says."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="entry_points")
    namespace = models.CharField(max_length=253)
    names = ArrayField(models.CharField(max_length=253), default=list)
    kind = models.CharField(max_length=16)
    source = models.CharField(max_length=510)
    route = models.TextField()

    class Meta:
        ordering = ["cluster", "namespace", "kind", "source", "id"]

    def __str__(self) -> str:
        return self.route


class ClusterPodChange(models.Model):
    """One step of a pod's history (created, deleted, phase, node) between two snapshots."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pod_changes")
    pod_key = models.CharField(max_length=300)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    change = models.CharField(max_length=12)
    before = models.CharField(max_length=253, blank=True)
    after = models.CharField(max_length=253, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "pk"]
        indexes = [
            models.Index(fields=["cluster", "namespace", "name"], name="podchange_ns_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} {self.change} {self.before}→{self.after}"


class ClusterNode(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    gpu_product = models.CharField(max_length=200, blank=True)
    allocatable_gpus = models.FloatField(default=0)
    state = models.JSONField(default=dict)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="clusternode_name")]

    def __str__(self) -> str:
        return self.name


class ClusterPriorityClass(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="priority_classes")
    name = models.CharField(max_length=253)
    value = models.IntegerField()
    state = models.JSONField(default=dict)
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["-value", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="clusterprioclass_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class ClusterEvent(models.Model):
    """A Kubernetes event, upserted by namespace/name (kubectl reports a repeating event
    once with a growing count)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="events")
    key = models.CharField(max_length=510)
    reason = models.CharField(max_length=128)
    type = models.CharField(max_length=16, blank=True)
    message = models.TextField(blank=True)
    object_kind = models.CharField(max_length=64, blank=True)
    object_namespace = models.CharField(max_length=253, blank=True)
    object_name = models.CharField(max_length=253, blank=True)
    count = models.IntegerField(default=1)
    state = models.JSONField(default=dict)
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen", "pk"]
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="clusterevent_key")]

    def __str__(self) -> str:
        return f"{self.reason} {self.object_namespace}/{self.object_name}"


class MetricLabels(models.Model):
    """One label set seen in one cluster's metrics, with the columns that link it to
    cluster objects: dcgm-exporter's `Hostname`/`gpu`/`UUID`, Kubernetes'
    `namespace`/`pod`/`container`, or the OTLP `k8s.*` resource attributes. A series is a
    metric name (`MetricName`) with a label set; `names` lists the ids of the names seen
    with this one, so a large cluster's first scrape makes a row per GPU, not one per GPU
    and metric (a dcgm GPU's 40 series share their labels). Points live in the
    day-partitioned chunk table `cluster_metricchunk` (raw SQL, see
    `services.metrics_store`)."""

    id = models.BigAutoField(primary_key=True)
    # No database constraint and no index of its own: the indexes below all lead with
    # the cluster. Label sets are only made by the metric loaders, for a cluster they
    # have just fetched or created; deleting a cluster deletes them (Django's cascade).
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="label_sets",
                                db_constraint=False, db_index=False)
    key = models.UUIDField(help_text="MD5 of the labels (services.metrics_ids.labels_key)")
    labels = models.JSONField(default=dict)
    names = ArrayField(models.BigIntegerField(), default=list)
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node = models.CharField(max_length=253, blank=True)
    gpu = models.CharField(max_length=64, blank=True)
    gpu_uuid = models.CharField(max_length=128, blank=True)
    first_seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="metriclabels_key")]
        indexes = [
            models.Index(fields=["cluster", "namespace", "pod"], name="metriclabels_pod"),
            models.Index(fields=["cluster", "node", "gpu"], name="metriclabels_gpu"),
        ]

    def __str__(self) -> str:
        return str(self.labels)


class MetricName(models.Model):
    """A metric name of one cluster, with the kind and unit it was first seen with."""

    id = models.BigAutoField(primary_key=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="metric_names",
                                db_constraint=False, db_index=False)
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16)
    unit = models.CharField(max_length=64, blank=True)
    first_seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="metricname_name")]

    def __str__(self) -> str:
        return self.name


class MetricSeries(models.Model):
    """One metric name with one label set in one cluster: a read-only view
    (`cluster_metricseries`, migration 0007) joining each label set with the names seen
    with it. Its id is `labels id << 32 | name id`, the id the readers of
    `services.metrics_read` take."""

    id = models.BigIntegerField(primary_key=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.DO_NOTHING, related_name="series",
                                db_constraint=False)
    label_set = models.ForeignKey(MetricLabels, on_delete=models.DO_NOTHING,
                                  db_column="labels_id", related_name="+", db_constraint=False)
    metric_name = models.ForeignKey(MetricName, on_delete=models.DO_NOTHING,
                                    db_column="name_id", related_name="+", db_constraint=False)
    name = models.CharField(max_length=255)
    labels = models.JSONField(default=dict)
    kind = models.CharField(max_length=16)
    unit = models.CharField(max_length=64, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    container = models.CharField(max_length=253, blank=True)
    node = models.CharField(max_length=253, blank=True)
    gpu = models.CharField(max_length=64, blank=True)
    gpu_uuid = models.CharField(max_length=128, blank=True)
    first_seen = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "cluster_metricseries"

    def __str__(self) -> str:
        return self.name


class ClusterWorkload(models.Model):
    """A workload (pod owner) with its declared priority beside the recommended one, as the
    last diagnosis run computed it (`risk.cluster.priorities.workload_priorities`)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="workloads")
    key = models.CharField(max_length=600, help_text="namespace/Kind/name")
    namespace = models.CharField(max_length=253)
    kind = models.CharField(max_length=64)
    name = models.CharField(max_length=253)
    declared_priority = models.IntegerField(default=0)
    declared_priority_class = models.CharField(max_length=253, blank=True)
    declared_qos = models.CharField(max_length=20, blank=True)
    gpus = models.FloatField(default=0)
    score = models.FloatField(default=0)
    tier = models.CharField(max_length=40)
    recommended_priority = models.IntegerField(default=0)
    recommended_qos = models.CharField(max_length=20, blank=True)
    direction = models.CharField(max_length=8)
    disagrees = models.BooleanField(default=False)
    reasons = models.JSONField(default=list)
    diagnoses = models.JSONField(default=list)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-disagrees", "-recommended_priority", "key"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "key"], name="clusterworkload_key")
        ]

    def __str__(self) -> str:
        return self.key
