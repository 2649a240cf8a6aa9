"""Purl searches through a btree that carries the list's sort key.

A search for `pkg:maven/org.example/lib` is a prefix of the lower-cased purl. The trigram
index answers it too, but every purl shares the trigrams of `pkg:`, the type and the common
namespaces, so at a million findings it reads most of its posting lists and then every
matching row's heap page. This index answers the prefix as a range, and its INCLUDE columns
(state, baseline priority, id, and the purl itself, which PostgreSQL needs beside an
expression for an index-only scan) let the count and the first page be read from the index
alone.
"""

from django.db import migrations

PURL_PREFIX_INDEX = (
    "CREATE INDEX IF NOT EXISTS findings_purl_prefix ON findings_finding "
    "(team_id, lower(component_purl) text_pattern_ops) "
    "INCLUDE (state, baseline_priority, id, component_purl)"
)


class Migration(migrations.Migration):

    dependencies = [
        ("findings", "0008_audit_chain_backfill"),
    ]

    operations = [
        migrations.RunSQL(PURL_PREFIX_INDEX, "DROP INDEX IF EXISTS findings_purl_prefix"),
    ]
