
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('accounts', '0001_initial'),
        ('findings', '0004_ranking_columns'),
    ]

    operations = [
        migrations.CreateModel(
            name='RankContext',
            fields=[
                ('digest', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('data', models.JSONField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.CreateModel(
            name='RankingRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=8)),
                ('trigger', models.CharField(blank=True, max_length=64)),
                ('requested_by', models.CharField(blank=True, max_length=160)),
                ('not_before', models.DateTimeField(default=django.utils.timezone.now)),
                ('incremental', models.BooleanField(default=False)),
                ('phase', models.CharField(blank=True, max_length=40)),
                ('weights', models.JSONField(blank=True, default=dict)),
                ('weights_version', models.CharField(blank=True, max_length=40)),
                ('inputs_digest', models.CharField(blank=True, max_length=64)),
                ('results_digest', models.CharField(blank=True, max_length=64)),
                ('counts', models.JSONField(blank=True, default=dict)),
                ('timings', models.JSONField(blank=True, default=dict)),
                ('error', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('previous', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='ranking.rankingrun')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='RankChange',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rank', models.IntegerField(null=True)),
                ('score', models.FloatField(null=True)),
                ('decision', models.CharField(blank=True, max_length=16)),
                ('previous_rank', models.IntegerField(null=True)),
                ('previous_score', models.FloatField(null=True)),
                ('previous_decision', models.CharField(blank=True, max_length=16)),
                ('why', models.JSONField(blank=True, default=list)),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('finding', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='rank_changes', to='findings.finding')),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='changes', to='ranking.rankingrun')),
            ],
            options={
                'ordering': ['at', 'id'],
            },
        ),
        migrations.AddIndex(
            model_name='rankingrun',
            index=models.Index(fields=['team', '-created_at'], name='rankingrun_team_created'),
        ),
        migrations.AddIndex(
            model_name='rankingrun',
            index=models.Index(condition=models.Q(('status__in', ['queued', 'running'])), fields=['team', 'status'], name='rankingrun_team_pending'),
        ),
        migrations.AddIndex(
            model_name='rankchange',
            index=models.Index(fields=['finding', 'at'], name='rankchange_finding_at'),
        ),
        migrations.AddIndex(
            model_name='rankchange',
            index=models.Index(fields=['run'], name='rankchange_run'),
        ),
    ]
