
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runtime', '0003_deployment'),
    ]

    operations = [
        migrations.AlterField(
            model_name='librarybucket',
            name='kind',
            field=models.CharField(choices=[('scope', 'Instrumentation scope'), ('code', 'Code namespace'), ('db', 'Database system'), ('messaging', 'Messaging system'), ('rpc', 'RPC system'), ('origin', 'Root spans from local or internal callers')], max_length=16),
        ),
    ]
