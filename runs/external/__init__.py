"""External workflows: Keeper stores and verifies their runs; outside workers execute their steps over HTTP."""
