"""The erasers settings.ERASERS names, one module per part of Keeper that keeps a subject's data."""
