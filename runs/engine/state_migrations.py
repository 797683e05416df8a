"""State schemas and their migrations: a checkpoint is never read "as it happens to look".

A workflow's SchemaSet names a validator per state-schema version and pure, deterministic
migrations MIGRATIONS[(n, n + 1)]. Migrating validates every intermediate result; a version with
no path is an UnsupportedCheckpoint (the run is suspended, never run by code that does not
understand its state).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.digests import json_digest
from core.errors import ApplicationError

State = dict[str, Any]


class UnsupportedCheckpoint(ApplicationError):
    code = "unsupported_checkpoint"


class StateSchemaError(ApplicationError):
    """A state does not match its schema version (raised by validators and by migrations)."""

    code = "state_schema_invalid"


@dataclass(frozen=True)
class MigrationStep:
    from_version: int
    to_version: int
    digest_before: str
    digest_after: str
    state: State  # the state after this hop


@dataclass(frozen=True)
class Migrated:
    state: State
    version: int
    steps: tuple[MigrationStep, ...]


class SchemaSet:
    def __init__(
        self,
        *,
        validators: dict[int, Callable[[State], None]],
        migrations: dict[tuple[int, int], Callable[[State], State]],
    ):
        for a, b in migrations:
            if b != a + 1:
                raise ValueError(f"a migration goes from n to n + 1, not {a} to {b}")
        self.validators = validators
        self.migrations = migrations
        self.current = max(validators)

    def validate(self, version: int, state: State) -> None:
        validator = self.validators.get(version)
        if validator is None:
            raise UnsupportedCheckpoint(f"state-schema version {version} is unknown to this code")
        validator(state)

    def path_exists(self, from_version: int) -> bool:
        if from_version == self.current:
            return True
        if from_version > self.current or from_version not in self.validators:
            return False
        return all((v, v + 1) in self.migrations for v in range(from_version, self.current))

    def migrate(self, state: State, from_version: int) -> Migrated:
        """Validate the stored state, then migrate one version at a time to the current one."""
        if not self.path_exists(from_version):
            raise UnsupportedCheckpoint(
                f"no migration path from state-schema version {from_version} to {self.current}",
                details={"from_version": from_version, "current": self.current},
            )
        self.validate(from_version, state)
        data, version, steps = state, from_version, []
        while version < self.current:
            before = json_digest(data)
            # Migrations are pure: they get a copy, so the stored checkpoint stays as it was.
            data = self.migrations[(version, version + 1)](copy.deepcopy(data))
            self.validate(version + 1, data)
            steps.append(MigrationStep(version, version + 1, before, json_digest(data), data))
            version += 1
        return Migrated(data, version, tuple(steps))
