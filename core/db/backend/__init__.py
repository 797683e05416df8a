"""Django's PostgreSQL backend, with the tenant carried inside every statement's own transaction."""
