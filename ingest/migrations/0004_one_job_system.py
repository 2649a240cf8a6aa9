# The one job system: IngestJob is a trustrank.jobs Job.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_login_failure'),
        ('ingest', '0003_job_indexes_covered'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField(
            model_name='ingestjob',
            old_name='submitter_label',
            new_name='requested_by_label',
        ),
        # Who asked, spelled as every job kind spells it (the rows keep their values).
        migrations.RenameField(
            model_name='ingestjob',
            old_name='api_key',
            new_name='requested_by_key',
        ),
        migrations.RenameField(
            model_name='ingestjob',
            old_name='submitted_by',
            new_name='requested_by_user',
        ),
        migrations.AddField(
            model_name='ingestjob',
            name='backend_pid',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ingestjob',
            name='backend_start',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ingestjob',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ingestjob',
            name='job_class',
            field=models.CharField(choices=[('interactive', 'Interactive'), ('batch', 'Batch')], default='interactive', max_length=12),
        ),
        migrations.AlterField(
            model_name='ingestjob',
            name='requested_by_key',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='accounts.apikey'),
        ),
        migrations.AlterField(
            model_name='ingestjob',
            name='requested_by_user',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='ingestjob',
            name='worker',
            field=models.CharField(blank=True, max_length=160),
        ),
        migrations.AlterField(
            model_name='ingestjob',
            name='created_at',
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.AlterField(
            model_name='ingestjob',
            name='phase',
            field=models.CharField(blank=True, max_length=60),
        ),
    ]
