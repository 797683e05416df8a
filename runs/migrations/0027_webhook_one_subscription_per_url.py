"""One live webhook subscription per tenant and URL: a subscribe sent twice (a retry, a double
click) made two, and every event was then delivered twice to the same endpoint. Duplicates already
stored are ended as a delete would end them (the newest stays; the others' pending deliveries are
cancelled, their history kept)."""

from __future__ import annotations

from django.db import migrations, models
from django.db.models import Q

DUPLICATES = """
WITH doomed AS (
  UPDATE webhook_subscriptions s SET deleted_at = now()
   WHERE s.deleted_at IS NULL
     AND EXISTS (SELECT 1 FROM webhook_subscriptions n
                  WHERE n.tenant_id = s.tenant_id AND n.url = s.url AND n.deleted_at IS NULL
                    AND (n.created_at, n.id) > (s.created_at, s.id))
  RETURNING s.id)
UPDATE webhook_deliveries d SET status = 'cancelled',
       last_error = 'subscription ended: a newer subscription to the same URL delivers its events'
  FROM doomed WHERE d.subscription_id = doomed.id AND d.status = 'pending'
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0026_redispatch_skips_external_runs")]

    operations = [
        migrations.RunSQL(DUPLICATES, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="webhooksubscription",
            constraint=models.UniqueConstraint(
                condition=Q(deleted_at__isnull=True), fields=("tenant", "url"), name="webhook_subs_one_per_url"
            ),
        ),
    ]
