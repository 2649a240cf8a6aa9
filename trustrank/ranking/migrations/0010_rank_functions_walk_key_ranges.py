from django.db import migrations

from trustrank.ranking import positions


class Migration(migrations.Migration):
    """The rank functions count inside a bucket by plain key ranges
    (`positions._walk`): a row comparison's range read every row of the threshold's and the
    row's `qkey`, thousands for a few dozen counted."""

    dependencies = [
        ('ranking', '0009_rank_change_keys'),
    ]

    operations = [
        # The reverse leaves these: same signatures, same results.
        migrations.RunSQL(
            positions.function_sql(positions.PRODUCT, name=positions.FUNCTION),
            migrations.RunSQL.noop,
        ),
    ]
