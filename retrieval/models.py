"""Documents and chunks with provenance and ACL (a later issue)."""
