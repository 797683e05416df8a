"""Tenant isolation inside PostgreSQL for memory items (see memory/migrations/_rls.py)."""

from django.db import migrations

from memory.migrations import _rls


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]
    operations = [_rls.policy("memory_items")]
