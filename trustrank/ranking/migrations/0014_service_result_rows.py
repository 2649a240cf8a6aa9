from django.db import migrations, models

# A run's per-service results become a row per service (`ServiceResultRow`) instead of one
# JSON document per set: the stored sets are split into rows, keeping their digests, before
# the document column goes. Back, the rows are folded into documents again.
_SPLIT = """
INSERT INTO ranking_serviceresultrow (digest, environment, name, exposure, data)
SELECT r.digest, env.key, svc.key, COALESCE(svc.value ->> 'exposure', ''), svc.value
  FROM ranking_serviceresults r, jsonb_each(r.data) env, jsonb_each(env.value) svc
"""

_FOLD = """
UPDATE ranking_serviceresults r SET data = COALESCE((
    SELECT jsonb_object_agg(e.environment, e.services)
      FROM (SELECT environment, jsonb_object_agg(name, data) AS services
              FROM ranking_serviceresultrow WHERE digest = r.digest
             GROUP BY environment) e), '{}'::jsonb)
"""


class Migration(migrations.Migration):

    dependencies = [
        ('ranking', '0013_rankedfinding_partitions'),
    ]

    operations = [
        migrations.CreateModel(
            name='ServiceResultRow',
            fields=[
                ('pk', models.CompositePrimaryKey('digest', 'environment', 'name', blank=True, editable=False, primary_key=True, serialize=False)),
                ('digest', models.CharField(max_length=64)),
                ('environment', models.TextField()),
                ('name', models.TextField()),
                ('exposure', models.TextField(blank=True)),
                ('data', models.JSONField()),
            ],
            options={
                'indexes': [models.Index(fields=['digest', 'environment', 'exposure', 'name'], name='serviceresultrow_exposure')],
            },
        ),
        migrations.RunSQL(_SPLIT, _FOLD),
        # With a default, so that going back adds the column to the rows there are ({}),
        # which the fold above then fills.
        migrations.AlterField(
            model_name='serviceresults', name='data', field=models.JSONField(default=dict),
        ),
        migrations.RemoveField(model_name='serviceresults', name='data'),
    ]
