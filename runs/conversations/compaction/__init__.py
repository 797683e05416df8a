"""Conversation compaction: compactors, checked summaries, token counting."""
