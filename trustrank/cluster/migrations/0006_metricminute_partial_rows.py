"""Per-minute rows become partial: each load appends its own (series, minute) rows by
COPY and readers combine the rows of a minute (min of mins, max of maxes, sums, the last
value by time); `services.metrics.metrics_minutes_compact` folds a finished day's rows
into one per minute. Merging into a stored minute (ON CONFLICT DO UPDATE) cost about four
times an appended row, so the primary key gives way to a plain index."""

from django.db import migrations

FORWARD = """
ALTER TABLE cluster_metricminute DROP CONSTRAINT cluster_metricminute_pkey;
CREATE INDEX cluster_metricminute_series ON cluster_metricminute (series_id, minute);
"""

# Back to one row per minute: fold every minute's partial rows, then the key again.
REVERSE = """
CREATE TEMP TABLE cluster_minute_unmerge ON COMMIT DROP AS
SELECT series_id, minute, min(min) AS min, max(max) AS max, sum(sum) AS sum,
       sum(count)::int4 AS count, (array_agg(last ORDER BY last_ms DESC, last DESC))[1] AS last,
       max(last_ms) AS last_ms
FROM cluster_metricminute GROUP BY series_id, minute HAVING count(*) > 1;
DELETE FROM cluster_metricminute m USING cluster_minute_unmerge u
WHERE m.series_id = u.series_id AND m.minute = u.minute;
INSERT INTO cluster_metricminute SELECT * FROM cluster_minute_unmerge;
DROP INDEX cluster_metricminute_series;
ALTER TABLE cluster_metricminute ADD PRIMARY KEY (series_id, minute);
"""


class Migration(migrations.Migration):
    dependencies = [("cluster", "0005_metricseries_cluster_unchecked")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
