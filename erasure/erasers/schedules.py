"""Schedules about a subject: deleted with the subject's data (they would start new runs about them)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from core.tenancy import tenant_bind
from erasure.matching import IDENTIFIER_SUBSTRING_CHARS, Scope, distinctive, id_pattern
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.engine.schedule_models import WorkflowSchedule


class SchedulesEraser(Eraser):
    """A schedule whose subject is the erased one, or whose input or last error names them or holds
    one of the request's distinctive texts, is deleted: it would start new runs about them."""

    name = "schedules"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        token = id_pattern(scope.subject_id) if len(scope.subject_id) >= IDENTIFIER_SUBSTRING_CHARS else None
        needles = [v.lower() for v in scope.values if distinctive(v)]
        doomed: list[UUID] = []
        with tenant_bind(scope.tenant_id):
            for schedule in WorkflowSchedule.objects.filter(tenant_id=scope.tenant_id):
                strings = [schedule.subject, schedule.last_error, *_strings(schedule.input)]
                text = " ".join(strings).lower()
                if (
                    schedule.subject == scope.subject_id
                    or (token is not None and token.search(text))
                    or any(s.lower() == scope.subject_id.lower() for s in strings)
                    or any(n in text for n in needles)
                ):
                    doomed.append(schedule.schedule_id)
            deleted, _ = WorkflowSchedule.objects.filter(schedule_id__in=doomed).delete()
        return {"schedules_deleted": deleted}

    def places(self) -> list[Place]:
        return [
            column_place(
                table="workflow_schedules",
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                owner_sql="t.subject",
                what=f"a schedule's {column.replace('_', ' ')} (the runs it will start are about the subject)",
            )
            for column, kind in (("input", "json"), ("subject", "text"), ("last_error", "text"))
        ]

    def free(self) -> list[Free]:
        return [
            free(
                "workflow_schedules",
                "a schedule's workflow, timing, policy and who created it: never about a data subject",
                "workflow_name",
                "cron",
                "overlap",
                "created_by",
            )
        ]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [str(value)] if value is not None else []
