
from django.db import migrations

DROP_TRIGGER = """
DROP TRIGGER IF EXISTS vulns_auditevent_no_update ON vulns_auditevent;
DROP FUNCTION IF EXISTS vulns_auditevent_refuse_update();
"""
CREATE_TRIGGER = """
CREATE OR REPLACE FUNCTION vulns_auditevent_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'vulns_auditevent is append-only: UPDATE refused';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER vulns_auditevent_no_update BEFORE UPDATE ON vulns_auditevent
    FOR EACH ROW EXECUTE FUNCTION vulns_auditevent_refuse_update();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('vulns', '0002_auditevent_append_only'),
        # The rows move to trustrank.findings first.
        ('findings', '0003_move_rows'),
    ]

    operations = [
        migrations.RunSQL(DROP_TRIGGER, CREATE_TRIGGER),
        migrations.DeleteModel(name='FindingComment'),
        migrations.DeleteModel(name='AuditEvent'),
        migrations.DeleteModel(name='Finding'),
    ]
