from django.db import migrations

# Audit events are append-only: the database itself refuses to rewrite one.
FORWARD = """
CREATE OR REPLACE FUNCTION vulns_auditevent_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'vulns_auditevent is append-only: UPDATE refused';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER vulns_auditevent_no_update BEFORE UPDATE ON vulns_auditevent
    FOR EACH ROW EXECUTE FUNCTION vulns_auditevent_refuse_update();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS vulns_auditevent_no_update ON vulns_auditevent;
DROP FUNCTION IF EXISTS vulns_auditevent_refuse_update();
"""


class Migration(migrations.Migration):
    dependencies = [("vulns", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
