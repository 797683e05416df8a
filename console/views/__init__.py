"""Console views: sign-in and home here; each role's screens in their own module."""
