"""Benchmarks in one place: they import the apps, and no app imports them (manage.py bench)."""
