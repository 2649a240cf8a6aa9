
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('findings', '0003_move_rows'),
        ('identity', '0002_findings_moved'),
        ('inventory', '0001_initial'),
        ('runtime', '0003_deployment'),
        ('vulns', '0003_findings_moved'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['team', 'updated_at'], name='findings_team_updated'),
        ),
    ]
