"""The audit log is append-only in the database itself: UPDATE and DELETE raise, for every role."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("console", "0001_initial")]
    operations = [
        migrations.RunSQL(
            sql=[
                """CREATE FUNCTION console_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN
                     RAISE EXCEPTION 'console_audit_log is append-only (% refused)', TG_OP
                       USING ERRCODE = 'insufficient_privilege';
                   END $$""",
                """CREATE TRIGGER console_audit_log_append_only BEFORE UPDATE OR DELETE ON console_audit_log
                   FOR EACH ROW EXECUTE FUNCTION console_audit_log_append_only()""",
            ],
            reverse_sql=[
                "DROP TRIGGER IF EXISTS console_audit_log_append_only ON console_audit_log",
                "DROP FUNCTION IF EXISTS console_audit_log_append_only()",
            ],
        ),
    ]
