"""Per-minute metric points, partitioned by day so retention drops whole partitions
(a DROP TABLE is instant and leaves no bloat, unlike a DELETE of millions of rows).
Partitions are created on demand by `services.metrics.minutes_partition_ensure`."""

from django.db import migrations

CREATE = """
CREATE TABLE cluster_metricminute (
    series_id bigint NOT NULL,
    minute timestamptz NOT NULL,
    min double precision NOT NULL,
    max double precision NOT NULL,
    sum double precision NOT NULL,
    count integer NOT NULL,
    last double precision NOT NULL,
    last_ms bigint NOT NULL,
    PRIMARY KEY (series_id, minute)
) PARTITION BY RANGE (minute);
"""

DROP = "DROP TABLE IF EXISTS cluster_metricminute CASCADE;"


class Migration(migrations.Migration):
    dependencies = [("cluster", "0002_cluster_evidence")]

    operations = [migrations.RunSQL(CREATE, DROP)]
