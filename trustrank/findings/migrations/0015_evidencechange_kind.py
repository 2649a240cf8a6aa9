# The kind of evidence a change records, so ranking can rank soon after a trace window.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('findings', '0014_finding_cvss_vector_finding_severity_source'),
    ]

    operations = [
        migrations.AddField(
            model_name='evidencechange',
            name='kind',
            field=models.CharField(blank=True, db_default='', default='', max_length=32),
        ),
    ]
