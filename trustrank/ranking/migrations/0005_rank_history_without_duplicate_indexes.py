"""RankChange keeps the (finding, at) and (run) indexes only: the foreign keys' own
single-column indexes duplicated them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('findings', '0010_finding_due_table'),
        ('ranking', '0004_service_results_lean_history'),
    ]

    operations = [
        migrations.AlterField(
            model_name='rankchange',
            name='finding',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rank_changes', to='findings.finding'),
        ),
        migrations.AlterField(
            model_name='rankchange',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='changes', to='ranking.rankingrun'),
        ),
    ]
