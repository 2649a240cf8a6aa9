from django.db import migrations


class Migration(migrations.Migration):
    """The bucket counts (ranking.0007) name their team by id only: a deleted team left its
    rows behind. They now reference the team and go with it, as every ranked row does. Rows
    of teams already deleted are removed first, so the constraint holds from the start."""

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
ALTER TABLE ranking_rankbucket ADD CONSTRAINT ranking_rankbucket_team_fk
    FOREIGN KEY (team_id) REFERENCES accounts_team (id) ON DELETE CASCADE;
ALTER TABLE ranking_rankbucketgroup ADD CONSTRAINT ranking_rankbucketgroup_team_fk
    FOREIGN KEY (team_id) REFERENCES accounts_team (id) ON DELETE CASCADE;
""",
            """
ALTER TABLE ranking_rankbucket DROP CONSTRAINT IF EXISTS ranking_rankbucket_team_fk;
ALTER TABLE ranking_rankbucketgroup DROP CONSTRAINT IF EXISTS ranking_rankbucketgroup_team_fk;
""",
        ),
    ]
