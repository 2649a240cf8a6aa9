
import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.expressions
import django.db.models.functions.comparison
import django.db.models.functions.math
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('accounts', '0001_initial'),
        ('identity', '0001_initial'),
        ('inventory', '0001_initial'),
        ('runtime', '0001_initial'),
        ('vulns', '0002_auditevent_append_only'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Finding',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('vulnerability', 'Vulnerability'), ('identity', 'Identity'), ('reliability', 'Reliability')], max_length=24)),
                ('category', models.CharField(blank=True, max_length=40)),
                ('source', models.CharField(choices=[('osv', 'OSV advisory match'), ('sbom', 'Reported in the SBOM (VDR/VEX)'), ('certificate', 'Certificate and identity evidence'), ('policy', 'Caller policy check'), ('traces', 'Trace evidence')], max_length=16)),
                ('fingerprint', models.CharField(max_length=64)),
                ('title', models.TextField(blank=True)),
                ('severity', models.CharField(choices=[('critical', 'Critical'), ('high', 'High'), ('medium', 'Medium'), ('low', 'Low'), ('none', 'None'), ('unknown', 'Unknown')], default='unknown', max_length=16)),
                ('severity_score', models.FloatField(default=5.0)),
                ('state', models.CharField(choices=[('in_triage', 'In triage'), ('exploitable', 'Exploitable'), ('resolved', 'Resolved'), ('resolved_with_pedigree', 'Resolved with pedigree'), ('false_positive', 'False positive'), ('not_affected', 'Not affected')], default='in_triage', max_length=24)),
                ('justification', models.CharField(blank=True, choices=[('code_not_present', 'Code not present'), ('code_not_reachable', 'Code not reachable'), ('requires_configuration', 'Requires configuration'), ('requires_dependency', 'Requires dependency'), ('requires_environment', 'Requires environment'), ('protected_by_compiler', 'Protected by compiler'), ('protected_at_runtime', 'Protected at runtime'), ('protected_at_perimeter', 'Protected at perimeter'), ('protected_by_mitigating_control', 'Protected by mitigating control')], max_length=40)),
                ('response', models.JSONField(blank=True, default=list)),
                ('detail', models.TextField(blank=True)),
                ('evidence', models.JSONField(blank=True, default=dict)),
                ('first_seen', models.DateTimeField(default=django.utils.timezone.now)),
                ('last_seen', models.DateTimeField(default=django.utils.timezone.now)),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
                ('auto_resolved', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('environment', models.CharField(blank=True, max_length=120)),
                ('spiffe_id', models.CharField(blank=True, max_length=2048)),
                ('component_key', models.CharField(blank=True, max_length=2048)),
                ('component_purl', models.CharField(blank=True, max_length=2048)),
                ('component_name', models.CharField(blank=True, max_length=512)),
                ('component_version', models.CharField(blank=True, max_length=255)),
                ('ecosystem', models.CharField(blank=True, max_length=64)),
                ('package_name', models.CharField(blank=True, max_length=512)),
                ('vuln_id', models.CharField(blank=True, max_length=128)),
                ('aliases', django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=128), blank=True, default=list, size=None)),
                ('cve_id', models.CharField(blank=True, max_length=32)),
                ('match_status', models.CharField(blank=True, choices=[('affected', 'Affected'), ('unknown', 'Unknown (version not comparable)'), ('reported', 'Reported by the SBOM')], max_length=16)),
                ('match_reason', models.TextField(blank=True)),
                ('fixed_versions', models.JSONField(blank=True, default=list)),
                ('cvss_score', models.FloatField(blank=True, null=True)),
                ('in_kev', models.BooleanField(default=False)),
                ('kev_date_added', models.DateField(blank=True, null=True)),
                ('epss', models.FloatField(blank=True, null=True)),
                ('epss_percentile', models.FloatField(blank=True, null=True)),
                ('vex_evidence', models.JSONField(blank=True, default=dict)),
                ('baseline_priority', models.GeneratedField(db_persist=True, expression=django.db.models.functions.math.Round(django.db.models.functions.comparison.Least(models.Value(100.0), django.db.models.expressions.CombinedExpression(django.db.models.expressions.CombinedExpression(django.db.models.expressions.CombinedExpression(models.F('severity_score'), '*', models.Value(6.0)), '+', django.db.models.expressions.CombinedExpression(django.db.models.functions.comparison.Coalesce(models.F('epss'), models.Value(0.0)), '*', models.Value(25.0))), '+', models.Case(models.When(in_kev=True, then=models.Value(15.0)), default=models.Value(0.0)))), precision=2), output_field=models.FloatField())),
                ('advisory', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='findings', to='vulns.advisory')),
                ('certificate', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='findings', to='identity.certificate')),
                ('component', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='inventory.component')),
                ('identity', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='identity.identity')),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.project')),
                ('project_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.projectversion')),
                ('service', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runtime.service')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team')),
            ],
            options={
                'ordering': ['-baseline_priority', '-id'],
            },
        ),
        migrations.CreateModel(
            name='Comment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('author_label', models.CharField(max_length=160)),
                ('body', models.TextField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('author', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('finding', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='comments', to='findings.finding')),
            ],
            options={
                'ordering': ['created_at', 'id'],
            },
        ),
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('subject_type', models.CharField(blank=True, max_length=64)),
                ('subject_id', models.CharField(blank=True, max_length=255)),
                ('environment', models.CharField(blank=True, max_length=120)),
                ('action', models.CharField(max_length=40)),
                ('actor_kind', models.CharField(choices=[('user', 'User'), ('api_key', 'API key'), ('system', 'System job')], max_length=8)),
                ('actor_label', models.CharField(max_length=160)),
                ('before', models.JSONField(blank=True, default=dict)),
                ('after', models.JSONField(blank=True, default=dict)),
                ('reason', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_key', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='accounts.apikey')),
                ('actor_user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('team', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.team')),
                ('finding', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='findings.finding')),
            ],
            options={
                'ordering': ['created_at', 'id'],
            },
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.OrderBy(models.F('baseline_priority'), descending=True), models.OrderBy(models.F('id'), descending=True), name='findings_team_prio'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.F('state'), models.OrderBy(models.F('baseline_priority'), descending=True), models.OrderBy(models.F('id'), descending=True), name='findings_team_state_prio'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.F('kind'), models.OrderBy(models.F('baseline_priority'), descending=True), models.OrderBy(models.F('id'), descending=True), name='findings_team_kind_prio'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.F('severity'), models.OrderBy(models.F('baseline_priority'), descending=True), models.OrderBy(models.F('id'), descending=True), name='findings_team_sev_prio'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(models.F('team'), models.OrderBy(models.F('baseline_priority'), descending=True), models.OrderBy(models.F('id'), descending=True), condition=models.Q(('in_kev', True)), name='findings_team_kev_prio'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['project_version', 'state'], name='findings_pv_state'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['project', 'state'], name='findings_project_state'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['team', 'environment', 'kind'], name='findings_team_env_kind'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['service'], name='findings_service'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['cve_id'], name='findings_cve'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['ecosystem', 'package_name'], name='findings_package'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=django.contrib.postgres.indexes.GinIndex(fields=['aliases'], name='findings_aliases_gin'),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['package_name'], name='findings_package_prefix', opclasses=['varchar_pattern_ops']),
        ),
        migrations.AddIndex(
            model_name='finding',
            index=models.Index(fields=['component_name'], name='findings_component_prefix', opclasses=['varchar_pattern_ops']),
        ),
        migrations.AddConstraint(
            model_name='finding',
            constraint=models.UniqueConstraint(fields=('team', 'fingerprint'), name='finding_team_fp'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['finding', 'created_at'], name='auditevent_finding_at'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['team', '-created_at'], name='auditevent_team_at'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['team', 'environment', '-created_at'], name='auditevent_team_env_at'),
        ),
    ]
