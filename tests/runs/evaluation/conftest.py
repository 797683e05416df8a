"""The support agent's fixtures (the sandbox behind live_server, a staff API client) for the replays."""

from tests.runs.workflows.test_support_agent import api, sandbox  # noqa: F401 - fixtures
