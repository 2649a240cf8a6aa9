
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('findings', '0003_move_rows'),
    ]

    operations = [
        migrations.AddField(
            model_name='finding',
            name='decision',
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name='finding',
            name='env_rank',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='finding',
            name='rank',
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
