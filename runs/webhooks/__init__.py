"""Signed webhooks: a tenant's subscriptions and the durable outbox of deliveries written with each event."""
