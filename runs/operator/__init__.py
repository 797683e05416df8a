"""Operator tooling: stuck runs, redispatch by id, history export/import, retention, chaos, replay."""
