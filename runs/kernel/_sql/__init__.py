"""The kernel's SQL: every statement that writes agent_runs and agent_events. Only runs.kernel imports it."""
