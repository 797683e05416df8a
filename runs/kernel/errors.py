"""Errors of the run engine."""

from __future__ import annotations

from core.errors import ApplicationError, Conflict, InvalidInput, NotFound


class RunNotFound(NotFound):
    code = "run_not_found"


class UnknownWorkflow(InvalidInput):
    code = "unknown_workflow"


class InvalidState(InvalidInput):
    code = "invalid_state"


class IdempotencyConflict(Conflict):
    """The same idempotency key was used before with a different request."""

    code = "idempotency_key_reused"


class ConcurrentResume(Conflict):
    """The run moved on (another revision, another lease epoch, another status): nothing was written."""

    code = "concurrent_resume"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class DrivenOutside(InvalidTransition):
    """A run whose steps its own process drives (registry.register_outside): Keeper's workers never
    step it, so resume, fork and rewind would only break it."""

    code = "run_driven_outside"


class RunImported(InvalidTransition):
    """An imported history copy: kept to read and fork, it never runs, resumes or changes here."""

    code = "run_imported"


class WorkflowDefinitionError(ApplicationError):
    code = "workflow_definition_error"


class SubjectErased(Conflict):
    """The run's subject was erased: its content is redacted and it never continues."""

    code = "subject_erased"
