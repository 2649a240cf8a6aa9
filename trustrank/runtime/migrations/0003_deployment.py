
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0001_initial'),
        ('runtime', '0002_findings_moved'),
    ]

    operations = [
        migrations.CreateModel(
            name='Deployment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('namespace', models.CharField(blank=True, max_length=120)),
                ('service_name', models.CharField(max_length=200)),
                ('human_impact', models.CharField(choices=[('low', 'Low'), ('medium', 'Medium'), ('high', 'High'), ('very high', 'Very high')], default='medium', max_length=12)),
                ('source', models.CharField(choices=[('sbom', 'SBOM upload named the service'), ('api', 'Set through the API'), ('telemetry', 'service.name and service.version matched one project version'), ('manual', 'Set by a person on the service page')], max_length=12)),
                ('set_by', models.CharField(blank=True, max_length=160)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('environment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deployments', to='runtime.environment')),
                ('project_version', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deployments', to='inventory.projectversion')),
            ],
            options={
                'ordering': ['environment', 'namespace', 'service_name'],
                'constraints': [models.UniqueConstraint(fields=('environment', 'namespace', 'service_name'), name='runtime_deployment_service_unique')],
            },
        ),
    ]
