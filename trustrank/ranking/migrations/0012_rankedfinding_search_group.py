from django.db import migrations, models


class Migration(migrations.Migration):
    """Each ranked row holds its finding's component search group, set here for the rows
    there are (before the index is built: one pass, not an index entry per row updated)."""

    dependencies = [
        ('findings', '0016_search_groups'),
        ('ranking', '0011_bucket_rows_follow_their_team'),
    ]

    operations = [
        migrations.AddField(
            model_name='rankedfinding',
            name='search_group',
            field=models.BigIntegerField(null=True),
        ),
        migrations.RunSQL(
            """
UPDATE ranking_rankedfinding r
   SET search_group = findings_search_group(f.package_name, f.component_name, f.component_purl)
  FROM findings_finding f
 WHERE f.id = r.finding_id
""",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name='rankedfinding',
            index=models.Index(fields=['team', 'search_group', 'qkey', 'finding'], name='rankedfinding_team_group'),
        ),
    ]
