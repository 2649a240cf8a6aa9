"""Due dates move from the findings table to FindingDue (finding id, team, decision, since,
due date, set by hand): a team's first ranking run wrote a due date into every finding, and
each such update rewrote every index of the findings table."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_login_failure'),
        ('findings', '0009_findings_purl_prefix'),
    ]

    operations = [
        migrations.CreateModel(
            name='FindingDue',
            fields=[
                ('finding', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='due', serialize=False, to='findings.finding')),
                ('decision', models.CharField(blank=True, default='', max_length=16)),
                ('since', models.DateField(blank=True, null=True)),
                ('due_date', models.DateField(blank=True, null=True)),
                ('manual', models.BooleanField(default=False)),
            ],
        ),
        migrations.AddField(
            model_name='findingdue',
            name='team',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
        ),
        migrations.AddIndex(
            model_name='findingdue',
            index=models.Index(fields=['team', 'due_date'], name='findingdue_team_due'),
        ),
        migrations.RunSQL(
            """
            INSERT INTO findings_findingdue (finding_id, team_id, decision, since, due_date,
                                             manual)
            SELECT id, team_id, due_decision, due_decision_since, due_date, due_date_manual
              FROM findings_finding
             WHERE due_date IS NOT NULL OR due_date_manual OR due_decision <> ''
            """,
            reverse_sql="""
            UPDATE findings_finding f
               SET due_decision = d.decision, due_decision_since = d.since,
                   due_date = d.due_date, due_date_manual = d.manual
              FROM findings_findingdue d
             WHERE d.finding_id = f.id
            """,
        ),
        migrations.RemoveIndex(
            model_name='finding',
            name='findings_team_due_open',
        ),
        migrations.RemoveField(
            model_name='finding',
            name='due_date',
        ),
        migrations.RemoveField(
            model_name='finding',
            name='due_date_manual',
        ),
        migrations.RemoveField(
            model_name='finding',
            name='due_decision',
        ),
        migrations.RemoveField(
            model_name='finding',
            name='due_decision_since',
        ),
    ]
