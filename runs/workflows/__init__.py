"""Workflow definitions only (refund, demo, conversation): what a user's own workflow looks like."""
