from django.db import migrations

# The ranked rows become a table partitioned by team. Every team's rows live in the shared
# default partition until a run rewrites a queue large enough to be worth a table of its
# own (`services/store_table.py`): that team then has a partition, itself partitioned by
# team with one default child, the table a full rewrite loads bare, indexes and swaps in.
# A partitioned table's unique indexes must hold its partition key, so the primary key is
# (finding, team); Django's model keeps `finding` as its key (a finding has one team).
_FORWARD = """
ALTER TABLE ranking_rankedfinding RENAME TO ranking_rankedfinding_shared;
ALTER INDEX rankedfinding_team_qkey RENAME TO ranking_rankedfinding_shared_qkey;
ALTER INDEX rankedfinding_team_group RENAME TO ranking_rankedfinding_shared_group;
ALTER INDEX rankedfinding_team_env_qkey RENAME TO ranking_rankedfinding_shared_env;
ALTER TABLE ranking_rankedfinding_shared DROP CONSTRAINT ranking_rankedfinding_pkey;
ALTER TABLE ranking_rankedfinding_shared
  ADD CONSTRAINT ranking_rankedfinding_shared_pkey PRIMARY KEY (finding_id, team_id);
CREATE TABLE ranking_rankedfinding (LIKE ranking_rankedfinding_shared INCLUDING DEFAULTS)
  PARTITION BY LIST (team_id);
ALTER TABLE ranking_rankedfinding
  ADD CONSTRAINT ranking_rankedfinding_pkey PRIMARY KEY (finding_id, team_id);
CREATE INDEX rankedfinding_team_qkey ON ranking_rankedfinding (team_id, qkey, finding_id);
CREATE INDEX rankedfinding_team_group
  ON ranking_rankedfinding (team_id, search_group, qkey, finding_id);
CREATE INDEX rankedfinding_team_env_qkey
  ON ranking_rankedfinding (team_id, environment, qkey, finding_id);
ALTER TABLE ranking_rankedfinding ATTACH PARTITION ranking_rankedfinding_shared DEFAULT;
"""

_REVERSE = """
CREATE TABLE ranking_rankedfinding_plain (LIKE ranking_rankedfinding INCLUDING DEFAULTS);
INSERT INTO ranking_rankedfinding_plain SELECT * FROM ranking_rankedfinding;
DROP TABLE ranking_rankedfinding CASCADE;
ALTER TABLE ranking_rankedfinding_plain RENAME TO ranking_rankedfinding;
ALTER TABLE ranking_rankedfinding
  ADD CONSTRAINT ranking_rankedfinding_pkey PRIMARY KEY (finding_id);
CREATE INDEX rankedfinding_team_qkey ON ranking_rankedfinding (team_id, qkey, finding_id);
CREATE INDEX rankedfinding_team_group
  ON ranking_rankedfinding (team_id, search_group, qkey, finding_id);
CREATE INDEX rankedfinding_team_env_qkey
  ON ranking_rankedfinding (team_id, environment, qkey, finding_id);
"""


class Migration(migrations.Migration):
    """The ranked rows partitioned by team, every team in the shared default partition."""

    dependencies = [
        ('ranking', '0012_rankedfinding_search_group'),
    ]

    operations = [
        migrations.RunSQL(_FORWARD, reverse_sql=_REVERSE),
    ]
