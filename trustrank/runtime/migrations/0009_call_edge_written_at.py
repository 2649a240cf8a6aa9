"""When each call edge row was written (`CallEdgeBucket.written_at`), for ranking runs that
re-read only the edges written since their previous read.

The column is added without a default, then given one: PostgreSQL fills a volatile default
(clock_timestamp) into every existing row by rewriting the table, while a column added
NULL costs nothing at any size. Rows from before stay NULL (written before any read)."""

from django.db import migrations, models

_DEFAULT = models.Func(function="clock_timestamp", output_field=models.DateTimeField())


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0008_call_graph_partial_rows"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="calledgebucket",
                    name="written_at",
                    field=models.DateTimeField(db_default=_DEFAULT, editable=False, null=True),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE runtime_calledgebucket ADD COLUMN written_at timestamptz NULL; "
                    "ALTER TABLE runtime_calledgebucket "
                    "ALTER COLUMN written_at SET DEFAULT clock_timestamp();",
                    "ALTER TABLE runtime_calledgebucket DROP COLUMN written_at;",
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="calledgebucket",
            index=models.Index(fields=["environment", "written_at"],
                               name="runtime_edge_env_written"),
        ),
    ]
