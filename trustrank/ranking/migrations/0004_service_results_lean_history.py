"""Per-service results move from each run's row to a table keyed by their digest (runs that
found the same share one row), and the rank history loses its database foreign keys."""

import hashlib

import django.db.models.deletion
import django.utils.timezone
import orjson
from django.db import migrations, models


def _digest(data):
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def forwards(apps, schema_editor):
    run_model = apps.get_model("ranking", "RankingRun")
    results = apps.get_model("ranking", "ServiceResults")
    for run in run_model.objects.exclude(services={}).only("pk", "services").iterator():
        digest = _digest(run.services)
        results.objects.get_or_create(digest=digest, defaults={"data": run.services})
        run_model.objects.filter(pk=run.pk).update(services_digest=digest)


def backwards(apps, schema_editor):
    run_model = apps.get_model("ranking", "RankingRun")
    results = apps.get_model("ranking", "ServiceResults")
    data = dict(results.objects.values_list("digest", "data"))
    for pk, digest in run_model.objects.exclude(services_digest="").values_list(
        "pk", "services_digest"
    ):
        run_model.objects.filter(pk=pk).update(services=data.get(digest, {}))


class Migration(migrations.Migration):

    dependencies = [
        ("ranking", "0003_rankedfinding_lean_writes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ServiceResults",
            fields=[
                ("digest", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("data", models.JSONField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.AddField(
            model_name="rankingrun",
            name="services_digest",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(model_name="rankingrun", name="services"),
        migrations.AlterField(
            model_name="rankchange",
            name="finding",
            field=models.ForeignKey(
                db_constraint=False, on_delete=django.db.models.deletion.CASCADE,
                related_name="rank_changes", to="findings.finding",
            ),
        ),
        migrations.AlterField(
            model_name="rankchange",
            name="run",
            field=models.ForeignKey(
                db_constraint=False, on_delete=django.db.models.deletion.CASCADE,
                related_name="changes", to="ranking.rankingrun",
            ),
        ),
    ]
