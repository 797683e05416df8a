"""Keeper's Python client: the worker protocol over HTTP and a worker loop around plain step functions."""

from __future__ import annotations

from keeper_client.client import Claim, KeeperClient, KeeperConflict, KeeperError
from keeper_client.worker import (
    Applied,
    Complete,
    Fail,
    LeaseLost,
    Next,
    OperationFailed,
    OperationInDoubt,
    StepContext,
    Suspend,
    Worker,
)

__all__ = [
    "Applied",
    "Claim",
    "Complete",
    "Fail",
    "KeeperClient",
    "KeeperConflict",
    "KeeperError",
    "LeaseLost",
    "Next",
    "OperationFailed",
    "OperationInDoubt",
    "StepContext",
    "Suspend",
    "Worker",
]
