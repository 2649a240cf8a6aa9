
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('findings', '0004_ranking_columns'),
        ('identity', '0002_findings_moved'),
        ('inventory', '0001_initial'),
        ('ranking', '0001_initial'),
        ('runtime', '0003_deployment'),
        ('vulns', '0003_findings_moved'),
    ]

    operations = [
        migrations.AddField(
            model_name='finding',
            name='rank_context',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='ranking.rankcontext'),
        ),
        migrations.AddField(
            model_name='finding',
            name='rank_environment',
            field=models.CharField(blank=True, max_length=120),
        ),
        migrations.AddField(
            model_name='finding',
            name='ranking_run',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='ranking.rankingrun'),
        ),
        migrations.AddField(
            model_name='finding',
            name='score',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.F('rank'), condition=models.Q(('rank__isnull', False)), name='findings_team_rank'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.F('rank_environment'), models.F('env_rank'), condition=models.Q(('rank__isnull', False)), name='findings_team_env_rank'),
        ),
    ]
