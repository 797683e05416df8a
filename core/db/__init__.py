"""How statements reach PostgreSQL: each carries its tenant inside its own transaction."""
