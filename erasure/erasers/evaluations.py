"""Evaluations about a subject: a replay's overrides and a round's (a prompt or a canned answer can
quote a customer), an evaluation set's name and description, and the subject's runs kept in a set.

The replays themselves are runs with the original's subject, so the runs eraser erases them with the
subject's other runs (their forks); this eraser clears what the evaluation keeps beside them.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from core.tenancy import tenant_bind
from erasure.matching import IDENTIFIER_SUBSTRING_CHARS, Scope, distinctive, id_pattern
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay

ERASED = "[erased]"


def _names_subject(scope: Scope) -> Any:
    token = id_pattern(scope.subject_id) if len(scope.subject_id) >= IDENTIFIER_SUBSTRING_CHARS else None
    needles = [v.lower() for v in scope.values if distinctive(v)]

    def names(value: Any) -> bool:
        text = (value if isinstance(value, str) else json.dumps(value, default=str)).lower()
        return (token is not None and token.search(text) is not None) or any(n in text for n in needles)

    return names


class EvaluationsEraser(Eraser):
    name = "evaluations"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        names = _names_subject(scope)
        counts = {"replay_overrides": 0, "round_overrides": 0, "set_texts": 0, "set_runs": 0}
        tenant = scope.tenant_id
        with tenant_bind(tenant):
            for replay in RunReplay.objects.filter(tenant_id=tenant).exclude(overrides={"erased": True}):
                about = replay.run_id in scope.run_ids or replay.original_run_id in scope.run_ids
                if about or names(replay.overrides):
                    RunReplay.objects.filter(tenant_id=tenant, run_id=replay.run_id).update(
                        overrides={"erased": True}
                    )
                    counts["replay_overrides"] += 1
            for eval_round in EvalRound.objects.filter(tenant_id=tenant):
                if names(eval_round.overrides) or names(eval_round.label):
                    EvalRound.objects.filter(tenant_id=tenant, round_id=eval_round.round_id).update(
                        overrides={"erased": True}, label=ERASED
                    )
                    counts["round_overrides"] += 1
            for eval_set in EvalSet.objects.filter(tenant_id=tenant):
                if names(eval_set.name) or names(eval_set.description):
                    EvalSet.objects.filter(tenant_id=tenant, set_id=eval_set.set_id).update(
                        name=f"{ERASED} {eval_set.set_id}", description=ERASED
                    )
                    counts["set_texts"] += 1
            counts["set_runs"], _ = EvalSetRun.objects.filter(
                tenant_id=tenant, run_id__in=scope.run_ids
            ).delete()
        return counts

    def places(self) -> list[Place]:
        def place(table: str, column: str, kind: str, what: str) -> Place:
            return column_place(
                table=table,
                column=column,
                kind=kind,
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by=self.name,
                what=what,
            )

        return [
            place(
                "run_replays", "overrides", "json", "a replay's overrides (a prompt, tools' canned answers)"
            ),
            place("eval_rounds", "overrides", "json", "an evaluation round's overrides"),
            place("eval_rounds", "label", "text", "an evaluation round's label"),
            place("eval_sets", "name", "text", "an evaluation set's name"),
            place("eval_sets", "description", "text", "an evaluation set's description"),
        ]

    def free(self) -> list[Free]:
        staff = (
            "the staff member or API key that acted (a console user or a key prefix), never a data subject"
        )
        return [
            free("eval_sets", staff, "created_by"),
            free("eval_set_runs", staff, "added_by"),
            free("eval_rounds", staff, "started_by"),
        ]
