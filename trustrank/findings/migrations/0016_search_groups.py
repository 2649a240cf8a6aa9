# Each half of the findings' search text once per distinct text, kept by triggers, so a
# package search finds its few groups first (trustrank/findings/search_groups.py).

import django.contrib.postgres.indexes
from django.db import migrations, models

def _groups_of(rows: str, p: str = "") -> str:
    """The INSERT of the distinct texts of `rows` (a FROM clause), or of one row's values
    (`p`: "NEW.")."""
    component = f"findings_component_text({p}package_name, {p}component_name, {p}component_purl)"
    advisory = f"findings_advisory_text({p}vuln_id, {p}cve_id, {p}aliases)"
    return f"""
INSERT INTO findings_searchgroup (id, part, text)
SELECT hashtextextended(t, 0), 0, t FROM (SELECT DISTINCT {component} AS t {rows}) c
 UNION ALL
SELECT hashtextextended(t, 1), 1, t FROM (SELECT DISTINCT {advisory} AS t {rows}) a
    ON CONFLICT (id) DO NOTHING"""


def trigram_index_create(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        if cur.fetchone() is None:
            return
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        cur.execute("CREATE INDEX IF NOT EXISTS searchgroup_text_trgm ON findings_searchgroup "
                    "USING gin (text gin_trgm_ops)")


def trigram_index_drop(apps, schema_editor):
    schema_editor.execute("DROP INDEX IF EXISTS searchgroup_text_trgm")


class Migration(migrations.Migration):

    dependencies = [
        ('findings', '0015_evidencechange_kind'),
    ]

    operations = [
        migrations.CreateModel(
            name='SearchGroup',
            fields=[
                ('id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('part', models.SmallIntegerField()),
                ('text', models.TextField()),
            ],
        ),
        # pg_trgm may be missing (the embedded server of a fresh clone, as for
        # findings_search_trgm in 0007): the index is made where the server has it; without
        # it the few texts are scanned.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name='searchgroup',
                    index=django.contrib.postgres.indexes.GinIndex(fields=['text'], name='searchgroup_text_trgm', opclasses=['gin_trgm_ops']),
                ),
            ],
            database_operations=[
                migrations.RunPython(trigram_index_create, trigram_index_drop),
            ],
        ),
        migrations.RunSQL(
            # The two halves of `Finding.search_text` (lower() of the parts joined by
            # spaces, so the whole is the advisory half, a space, the component half).
            "CREATE OR REPLACE FUNCTION findings_component_text(varchar, varchar, varchar) "
            "RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS "
            "$$ SELECT lower($1 || ' ' || $2 || ' ' || $3) $$;"
            "CREATE OR REPLACE FUNCTION findings_advisory_text(varchar, varchar, varchar[]) "
            "RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS "
            "$$ SELECT lower($1 || ' ' || $2 || ' ' || findings_aliases_text($3)) $$;"
            # A finding's component group: what a ranked row holds (ranking.0012).
            "CREATE OR REPLACE FUNCTION findings_search_group(varchar, varchar, varchar) "
            "RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS "
            "$$ SELECT hashtextextended(findings_component_text($1, $2, $3), 0) $$;",
            reverse_sql=(
                "DROP FUNCTION IF EXISTS findings_search_group(varchar, varchar, varchar);"
                "DROP FUNCTION IF EXISTS findings_advisory_text(varchar, varchar, varchar[]);"
                "DROP FUNCTION IF EXISTS findings_component_text(varchar, varchar, varchar);"
            ),
        ),
        migrations.RunSQL(
            # Inserts: once per statement, over its rows (a bulk insert of thousands of
            # findings makes one pass, not a call per row). Updates: per row, only when the
            # search text changed (rare: a finding's component is part of its identity).
            "CREATE OR REPLACE FUNCTION findings_search_groups_inserted() RETURNS trigger "
            "LANGUAGE plpgsql AS $f$ BEGIN"
            + _groups_of("FROM new_rows") + "; RETURN NULL; END $f$;"
            "CREATE OR REPLACE FUNCTION findings_search_groups_updated() RETURNS trigger "
            "LANGUAGE plpgsql AS $f$ BEGIN"
            + _groups_of("", p="NEW.") + "; RETURN NULL; END $f$;"
            "CREATE TRIGGER findings_search_groups_insert AFTER INSERT ON findings_finding "
            "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
            "EXECUTE FUNCTION findings_search_groups_inserted();"
            "CREATE TRIGGER findings_search_groups_update AFTER UPDATE ON findings_finding "
            "FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text) "
            "EXECUTE FUNCTION findings_search_groups_updated();"
            + _groups_of("FROM findings_finding") + ";",
            reverse_sql=(
                "DROP TRIGGER IF EXISTS findings_search_groups_update ON findings_finding;"
                "DROP TRIGGER IF EXISTS findings_search_groups_insert ON findings_finding;"
                "DROP FUNCTION IF EXISTS findings_search_groups_updated();"
                "DROP FUNCTION IF EXISTS findings_search_groups_inserted();"
            ),
        ),
    ]
