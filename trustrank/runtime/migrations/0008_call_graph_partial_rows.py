"""Call edge and library buckets become partial: each trace job appends its own rows (an
INSERT, where ON CONFLICT DO UPDATE made concurrent jobs of one team wait on each other's
row locks and merged histograms row by row), readers add a bucket's rows up, and
`services.compaction.call_graph_compact` folds a finished bucket's rows into one. The
unique keys give way to plain indexes on the same columns."""

from django.db import migrations, models

# Back to one row per key: fold every bucket's partial rows first, then the keys again.
FOLD = """
CREATE TEMP TABLE runtime_edge_unmerge ON COMMIT DROP AS
SELECT environment_id, caller_id, callee_id, bucket_start, sum(calls)::bigint AS calls,
       sum(errors)::bigint AS errors, sum(tls_calls)::bigint AS tls_calls,
       sum(mtls_calls)::bigint AS mtls_calls,
       COALESCE((SELECT array_agg(t.v ORDER BY t.i) FROM (
           SELECT h.i, sum(h.v)::bigint AS v
             FROM runtime_calledgebucket g, unnest(g.hist) WITH ORDINALITY AS h(v, i)
            WHERE g.caller_id = b.caller_id AND g.callee_id = b.callee_id
              AND g.bucket_start = b.bucket_start
            GROUP BY h.i) t), '{}') AS hist,
       max(last_seen) AS last_seen
  FROM runtime_calledgebucket b
 GROUP BY environment_id, caller_id, callee_id, bucket_start HAVING count(*) > 1;
DELETE FROM runtime_calledgebucket b USING runtime_edge_unmerge u
 WHERE b.caller_id = u.caller_id AND b.callee_id = u.callee_id
   AND b.bucket_start = u.bucket_start;
INSERT INTO runtime_calledgebucket (environment_id, caller_id, callee_id, bucket_start, calls,
                                    errors, tls_calls, mtls_calls, hist, last_seen)
SELECT * FROM runtime_edge_unmerge;
CREATE TEMP TABLE runtime_library_unmerge ON COMMIT DROP AS
SELECT service_id, bucket_start, kind, name, version, sum(spans)::bigint AS spans
  FROM runtime_librarybucket
 GROUP BY service_id, bucket_start, kind, name, version HAVING count(*) > 1;
DELETE FROM runtime_librarybucket b USING runtime_library_unmerge u
 WHERE b.service_id = u.service_id AND b.bucket_start = u.bucket_start AND b.kind = u.kind
   AND b.name = u.name AND b.version = u.version;
INSERT INTO runtime_librarybucket (service_id, bucket_start, kind, name, version, spans)
SELECT * FROM runtime_library_unmerge;
-- The foreign keys' deferred checks of these rows now, or the keys cannot be added after.
SET CONSTRAINTS ALL IMMEDIATE;
"""


class Migration(migrations.Migration):
    dependencies = [("runtime", "0007_deployment_ingress_mark")]

    operations = [
        migrations.RemoveConstraint(model_name="calledgebucket", name="runtime_edge_bucket_unique"),
        migrations.AddIndex(
            model_name="calledgebucket",
            index=models.Index(fields=["caller", "callee", "bucket_start"],
                               name="runtime_edge_bucket"),
        ),
        migrations.RemoveConstraint(
            model_name="librarybucket", name="runtime_library_bucket_unique"
        ),
        migrations.AddIndex(
            model_name="librarybucket",
            index=models.Index(fields=["service", "bucket_start", "kind", "name", "version"],
                               name="runtime_library_bucket"),
        ),
        # Run backwards only, and first: the keys come back once each bucket is one row.
        migrations.RunSQL(migrations.RunSQL.noop, FOLD),
    ]
