"""Series become a label set (`MetricLabels`) and a name (`MetricName`), and their minutes
chunks: one row per (cluster, name, minute) holding the packed minutes of every series of
that name (see `services.metrics`). A row per series (320,000 for a large cluster's first
scrape) and a row per series and minute cost PostgreSQL more than the rest of the ingest
together. `cluster_metricseries` becomes a view of the label sets and their names, with
ids `labels id << 32 | name id`.

The stored data moves: names and label sets from the series (the key is the same MD5 as
`services.metrics_ids.labels_key`), each day partition's minutes combined per series and
packed per (name, minute) with PostgreSQL's big-endian binary sends, which is the chunk
format. There is no way back (the series ids change).
"""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

CHUNKS = """
CREATE TABLE cluster_metricchunk (
    cluster_id bigint NOT NULL,
    name_id bigint NOT NULL,
    minute timestamptz NOT NULL,
    series integer NOT NULL,
    data bytea NOT NULL
) PARTITION BY RANGE (minute);
CREATE INDEX cluster_metricchunk_name ON cluster_metricchunk (cluster_id, name_id, minute);
ALTER TABLE cluster_metricchunk ALTER COLUMN data SET STORAGE EXTERNAL;

INSERT INTO cluster_metricname (cluster_id, name, kind, unit, first_seen)
SELECT cluster_id, name, (array_agg(kind ORDER BY id))[1], (array_agg(unit ORDER BY id))[1],
       min(first_seen)
FROM cluster_metricseries GROUP BY cluster_id, name;

CREATE TEMP TABLE cluster_series_move ON COMMIT DROP AS
SELECT s.id AS old_id, s.cluster_id, n.id AS name_id,
       md5(coalesce((SELECT string_agg(e.key || chr(29) || e.value, chr(30)
                                       ORDER BY e.key COLLATE "C")
                     FROM jsonb_each_text(s.labels) e), ''))::uuid AS key,
       s.labels, s.namespace, s.pod, s.container, s.node, s.gpu, s.gpu_uuid, s.first_seen,
       0::bigint AS labels_id
FROM cluster_metricseries s
JOIN cluster_metricname n ON n.cluster_id = s.cluster_id AND n.name = s.name;

INSERT INTO cluster_metriclabels (cluster_id, key, labels, names, namespace, pod, container,
                                  node, gpu, gpu_uuid, first_seen)
SELECT cluster_id, key, (array_agg(labels))[1], array_agg(DISTINCT name_id ORDER BY name_id),
       (array_agg(namespace))[1], (array_agg(pod))[1], (array_agg(container))[1],
       (array_agg(node))[1], (array_agg(gpu))[1], (array_agg(gpu_uuid))[1], min(first_seen)
FROM cluster_series_move GROUP BY cluster_id, key;

UPDATE cluster_series_move m SET labels_id = l.id
FROM cluster_metriclabels l WHERE l.cluster_id = m.cluster_id AND l.key = m.key;
CREATE INDEX ON cluster_series_move (old_id);

DO $$
DECLARE
    part record;
    day date;
    target text;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'cluster_metricminute'::regclass
    LOOP
        day := to_date(right(part.relname, 8), 'YYYYMMDD');
        target := 'cluster_metricchunk_p' || to_char(day, 'YYYYMMDD');
        EXECUTE format('CREATE TABLE %I PARTITION OF cluster_metricchunk '
                       'FOR VALUES FROM (%L) TO (%L)', target,
                       day::timestamp AT TIME ZONE 'UTC',
                       (day + 1)::timestamp AT TIME ZONE 'UTC');
        EXECUTE format('ALTER TABLE %I ALTER COLUMN data SET STORAGE EXTERNAL', target);
        EXECUTE format($q$
            INSERT INTO %I (cluster_id, name_id, minute, series, data)
            SELECT m.cluster_id, m.name_id, c.minute, count(*),
                   string_agg(int8send(m.labels_id) || float8send(c.min) || float8send(c.max)
                              || float8send(c.sum) || int4send(c.count)
                              || float8send(c.last) || int8send(c.last_ms),
                              ''::bytea ORDER BY m.labels_id)
            FROM (SELECT series_id, minute, min(min) AS min, max(max) AS max,
                         sum(sum) AS sum, sum(count)::int4 AS count,
                         (array_agg(last ORDER BY last_ms DESC, last DESC))[1] AS last,
                         max(last_ms) AS last_ms
                  FROM %I GROUP BY series_id, minute) c
            JOIN cluster_series_move m ON m.old_id = c.series_id
            GROUP BY m.cluster_id, m.name_id, c.minute
        $q$, target, part.relname);
    END LOOP;
END $$;
"""

VIEW = """
DROP TABLE cluster_metricminute;
DROP TABLE cluster_metricseries;
CREATE VIEW cluster_metricseries AS
SELECT l.id << 32 | n.id AS id, l.cluster_id, l.id AS labels_id, n.id AS name_id, n.name,
       l.labels, n.kind, n.unit, l.namespace, l.pod, l.container, l.node, l.gpu, l.gpu_uuid,
       l.first_seen
FROM cluster_metriclabels l
JOIN cluster_metricname n ON n.cluster_id = l.cluster_id AND n.id = ANY (l.names);
"""


class Migration(migrations.Migration):
    dependencies = [("cluster", "0006_metricminute_partial_rows")]

    operations = [
        migrations.CreateModel(
            name="MetricLabels",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", models.UUIDField(
                    help_text="MD5 of the labels (services.metrics_ids.labels_key)")),
                ("labels", models.JSONField(default=dict)),
                ("names", django.contrib.postgres.fields.ArrayField(
                    base_field=models.BigIntegerField(), default=list, size=None)),
                ("namespace", models.CharField(blank=True, max_length=253)),
                ("pod", models.CharField(blank=True, max_length=253)),
                ("container", models.CharField(blank=True, max_length=253)),
                ("node", models.CharField(blank=True, max_length=253)),
                ("gpu", models.CharField(blank=True, max_length=64)),
                ("gpu_uuid", models.CharField(blank=True, max_length=128)),
                ("first_seen", models.DateTimeField()),
                ("cluster", models.ForeignKey(
                    db_constraint=False, db_index=False,
                    on_delete=django.db.models.deletion.CASCADE, related_name="label_sets",
                    to="cluster.cluster")),
            ],
            options={
                "indexes": [
                    models.Index(fields=["cluster", "namespace", "pod"],
                                 name="metriclabels_pod"),
                    models.Index(fields=["cluster", "node", "gpu"], name="metriclabels_gpu"),
                ],
                "constraints": [models.UniqueConstraint(fields=("cluster", "key"),
                                                        name="metriclabels_key")],
            },
        ),
        migrations.CreateModel(
            name="MetricName",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=255)),
                ("kind", models.CharField(max_length=16)),
                ("unit", models.CharField(blank=True, max_length=64)),
                ("first_seen", models.DateTimeField()),
                ("cluster", models.ForeignKey(
                    db_constraint=False, db_index=False,
                    on_delete=django.db.models.deletion.CASCADE, related_name="metric_names",
                    to="cluster.cluster")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("cluster", "name"),
                                                        name="metricname_name")],
            },
        ),
        migrations.RunSQL(CHUNKS),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(VIEW)],
            state_operations=[
                migrations.DeleteModel(name="MetricSeries"),
                migrations.CreateModel(
                    name="MetricSeries",
                    fields=[
                        ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=255)),
                        ("labels", models.JSONField(default=dict)),
                        ("kind", models.CharField(max_length=16)),
                        ("unit", models.CharField(blank=True, max_length=64)),
                        ("namespace", models.CharField(blank=True, max_length=253)),
                        ("pod", models.CharField(blank=True, max_length=253)),
                        ("container", models.CharField(blank=True, max_length=253)),
                        ("node", models.CharField(blank=True, max_length=253)),
                        ("gpu", models.CharField(blank=True, max_length=64)),
                        ("gpu_uuid", models.CharField(blank=True, max_length=128)),
                        ("first_seen", models.DateTimeField()),
                        ("cluster", models.ForeignKey(
                            db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING,
                            related_name="series", to="cluster.cluster")),
                        ("label_set", models.ForeignKey(
                            db_column="labels_id", db_constraint=False,
                            on_delete=django.db.models.deletion.DO_NOTHING, related_name="+",
                            to="cluster.metriclabels")),
                        ("metric_name", models.ForeignKey(
                            db_column="name_id", db_constraint=False,
                            on_delete=django.db.models.deletion.DO_NOTHING, related_name="+",
                            to="cluster.metricname")),
                    ],
                    options={"db_table": "cluster_metricseries", "managed": False},
                ),
            ],
        ),
    ]
