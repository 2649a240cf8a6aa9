"""A revision on each service and deployment row, moved on every change of what a ranking
run reads of it in the statements the revision spares (`runtime.revisions`): a run whose
team's revisions stand skips reading 100,000 services again (91 ms of PostgreSQL and
0.1 s of Python per run at that size).

The columns are added NULL, then given their default: a volatile default (nextval) on
ADD COLUMN rewrites the table, a NULL column costs nothing at any size. A row from before
keeps NULL until it changes (`revisions` counts rows, so it still counts).

A trigger, not the writers: trace ingest, the sweep, the ingress mark, the deployment API
and SBOM metadata all write these tables, some in raw SQL. It fires only when a column
the run reads changes; `last_seen` and `first_seen`, written by every trace batch, are
not among them, so an ingest that changes nothing read keeps its updates HOT."""

from django.db import migrations, models

_NEXT = models.Func(models.Value("runtime_ranked_revision"), function="nextval",
                    output_field=models.BigIntegerField())

# The columns a ranking run reads, per table, in the statements the revision spares: the
# services, the declared services and the deployments from telemetry (ranking.inputs.graph,
# ranking.entry_points, runtime.deployment). A deployment's version, impact and source are
# read by the deployments statement of every run (20,000 rows, 19 ms), so a change of
# impact, the most common one, does not cost a read of every service.
_SERVICE_READ = ("environment_id", "kind", "namespace", "name", "version", "attributes",
                 "ingress_override", "ingress_set_by_label", "ingress_set_via",
                 "ingress_set_at")
# Of a service's attributes, the keys those statements read: the rest (an SDK's
# `service.instance.id`, which differs per replica and so changes with most batches) is
# merged into the row by trace ingest without moving the revision.
_ATTRIBUTES_READ = ("trustrank.ingress", "trustrank.ingress.client", "k8s.cluster.name",
                    "k8s.namespace.name")
_DEPLOYMENT_READ = ("environment_id", "namespace", "service_name", "ingress_override",
                    "ingress_set_by_label", "ingress_set_via", "ingress_set_at")


def _row(prefix: str, columns: tuple[str, ...]) -> str:
    def read(column: str) -> list[str]:
        if column == "attributes":
            return [f"({prefix}.attributes -> '{key}')" for key in _ATTRIBUTES_READ]
        return [f"{prefix}.{column}"]

    return "(" + ", ".join(part for c in columns for part in read(c)) + ")"


def _forward(table: str, columns: tuple[str, ...]) -> str:
    return f"""
ALTER TABLE {table} ADD COLUMN ranked_revision bigint NULL;
ALTER TABLE {table} ALTER COLUMN ranked_revision SET DEFAULT nextval('runtime_ranked_revision');
CREATE TRIGGER {table}_ranked_revision BEFORE UPDATE ON {table} FOR EACH ROW
    WHEN ({_row("OLD", columns)} IS DISTINCT FROM {_row("NEW", columns)})
    EXECUTE FUNCTION runtime_ranked_revision_next();
"""


def _backward(table: str) -> str:
    return f"""
DROP TRIGGER IF EXISTS {table}_ranked_revision ON {table};
ALTER TABLE {table} DROP COLUMN IF EXISTS ranked_revision;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0009_call_edge_written_at"),
    ]

    operations = [
        migrations.RunSQL(
            """
CREATE SEQUENCE runtime_ranked_revision;
CREATE FUNCTION runtime_ranked_revision_next() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.ranked_revision := nextval('runtime_ranked_revision');
    RETURN NEW;
END
$$;
""",
            """
DROP FUNCTION IF EXISTS runtime_ranked_revision_next();
DROP SEQUENCE IF EXISTS runtime_ranked_revision;
""",
        ),
        *(
            migrations.SeparateDatabaseAndState(
                state_operations=[
                    migrations.AddField(
                        model_name=model,
                        name="ranked_revision",
                        field=models.BigIntegerField(db_default=_NEXT, editable=False,
                                                     null=True),
                    ),
                ],
                database_operations=[
                    migrations.RunSQL(_forward(table, columns), _backward(table)),
                ],
            )
            for model, table, columns in (
                ("service", "runtime_service", _SERVICE_READ),
                ("deployment", "runtime_deployment", _DEPLOYMENT_READ),
            )
        ),
    ]
