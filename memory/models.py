"""Long-term memory: confirmed claims with provenance, scope, TTL and invalidation (a later issue)."""
