
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runtime', '0001_initial'),
        # The rows move to trustrank.findings first.
        ('findings', '0003_move_rows'),
    ]

    operations = [
        migrations.DeleteModel(
            name='BrokenContextFinding',
        ),
    ]
