"""Raw payloads are compressed by TOAST with lz4 instead of pglz. The receivers store every
upload before answering, and a 0.66 MB OTLP export took PostgreSQL about twice as long to
compress with pglz (to the same size: protobuf compresses alike with both), which the
sender waits for; the worker's read decompresses faster too. Values already stored keep
their compression. A server built without lz4 keeps pglz."""

from django.db import migrations

FORWARD = """
DO $$ BEGIN
    ALTER TABLE ingest_ingestpayload ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN NULL;
END $$;
"""
REVERSE = "ALTER TABLE ingest_ingestpayload ALTER COLUMN data SET COMPRESSION pglz"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0006_ingest_job_kinds_nvd_vex")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
