"""The durable engine: models, the one SQL module (store.py), steps, leases, dispatch, resume, operations, approvals, forks, the workflow registry and its public step types."""
