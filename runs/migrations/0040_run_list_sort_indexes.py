from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0039_agent_events_partitioned"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["tenant", "workflow_name", "run_id"], name="agent_runs_tenant_wf_idx"),
        ),
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["tenant", "status", "run_id"], name="agent_runs_tenant_st_run_idx"),
        ),
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["tenant", "subject", "run_id"], name="agent_runs_tenant_subject_idx"),
        ),
    ]
