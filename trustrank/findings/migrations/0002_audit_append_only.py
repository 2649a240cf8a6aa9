from django.db import migrations

# Audit events are append-only: the database itself refuses to rewrite or remove one.
# TRUNCATE is refused too, unless the session says `SET trustrank.allow_audit_truncate = on`:
# only the test suite's connections do (its transactional tests empty every table between
# tests); nothing in the application sets it.
FORWARD = """
CREATE OR REPLACE FUNCTION findings_auditevent_refuse() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE'
       AND coalesce(current_setting('trustrank.allow_audit_truncate', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'findings_auditevent is append-only: % refused', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER findings_auditevent_no_update BEFORE UPDATE OR DELETE ON findings_auditevent
    FOR EACH ROW EXECUTE FUNCTION findings_auditevent_refuse();
CREATE TRIGGER findings_auditevent_no_truncate BEFORE TRUNCATE ON findings_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION findings_auditevent_refuse();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS findings_auditevent_no_update ON findings_auditevent;
DROP TRIGGER IF EXISTS findings_auditevent_no_truncate ON findings_auditevent;
DROP FUNCTION IF EXISTS findings_auditevent_refuse();
"""


class Migration(migrations.Migration):
    dependencies = [("findings", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
