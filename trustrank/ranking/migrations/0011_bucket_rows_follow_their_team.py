from django.db import migrations


class Migration(migrations.Migration):
    """The bucket counts (ranking.0007) name their team by id only: a deleted team left its
    rows behind. A trigger on the teams table now deletes a deleted team's rows in the same
    statement, as the ORM's cascade does its ranked rows. Not a foreign key: a foreign key
    would make every TRUNCATE of the teams table (Django's test flush) name these tables
    too. Rows of teams already deleted are removed first."""

    dependencies = [
        ('accounts', '0002_login_failure'),
        ('ranking', '0010_rank_functions_walk_key_ranges'),
    ]

    operations = [
        migrations.RunSQL(
            """
DELETE FROM ranking_rankbucket b
 WHERE NOT EXISTS (SELECT 1 FROM accounts_team t WHERE t.id = b.team_id);
DELETE FROM ranking_rankbucketgroup g
 WHERE NOT EXISTS (SELECT 1 FROM accounts_team t WHERE t.id = g.team_id);
CREATE OR REPLACE FUNCTION ranking_team_buckets_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ranking_rankbucket WHERE team_id IN (SELECT id FROM gone);
    DELETE FROM ranking_rankbucketgroup WHERE team_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;
CREATE TRIGGER ranking_team_buckets_delete
    AFTER DELETE ON accounts_team REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION ranking_team_buckets_delete();
""",
            """
DROP TRIGGER IF EXISTS ranking_team_buckets_delete ON accounts_team;
DROP FUNCTION IF EXISTS ranking_team_buckets_delete();
""",
        ),
    ]
