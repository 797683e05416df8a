"""Conversations: messages, session windows, compaction, context building, learning, and their erasure."""
