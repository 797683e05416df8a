"""Starting replays and keeping evaluation sets: the writes of runs/evaluation/.

A replay is a fork of the original at `at_seq`, marked replay, started at once, with its overrides
recorded beside it (run_replays) in the fork's transaction. A conversation's replay is fed the
original's later customer messages one at a time, each when the replay waits for input, so every
reply is made from the conversation as it stood when the original answered.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction

from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_bind, tenant_of_call
from runs.conversations.messages import conversation_append
from runs.engine.forks import run_fork_once
from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay
from runs.engine.selectors import run_get
from runs.evaluation.overrides import overrides_parse
from runs.evaluation.selectors import AWAITING_INPUT, FED_PREFIX
from runs.kernel.errors import RunNotFound
from runs.kernel.models import AgentEvent, AgentRun, RunStatus

MAX_SET_RUNS = 200


class ReplayOfReplay(InvalidInput):
    """Replays compare with an original: a replay of a replay would compare with a replay."""

    code = "replay_of_replay"


class EvalSetNameTaken(Conflict):
    code = "eval_set_name_taken"


class EvalSetNotFound(NotFound):
    code = "eval_set_not_found"


def _at_seq(run: AgentRun, at_seq: int | None) -> int:
    """Where the replay forks: given, or the original's first event (the whole run again)."""
    seq = 1 if at_seq is None else at_seq
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= run.state_revision:
        raise InvalidInput(
            f"at_seq must be an event of run {run.run_id} (1..{run.state_revision})", code="invalid_seq"
        )
    return seq


@tenant_of_call
def replay_start(
    *,
    run_id: UUID,
    actor: str,
    at_seq: int | None = None,
    overrides: dict[str, Any] | None = None,
    eval_round: EvalRound | None = None,
) -> AgentRun:
    """A replay of this run from event `at_seq` with these overrides (checked by overrides_parse)."""
    original = run_get(run_id=run_id)
    if original.replay:
        raise ReplayOfReplay(f"run {run_id} is itself a replay; replay its original run instead")
    seq = _at_seq(original, at_seq)
    run_with, shown = overrides_parse(overrides)
    patch = {"system_prompt": run_with["prompt"]} if "prompt" in run_with else None
    with transaction.atomic():
        fork = run_fork_once(
            run_id=original.run_id,
            at_seq=seq,
            actor=actor,
            start=True,
            note=f"replay{' of round ' + str(eval_round.round_id) if eval_round else ''}",
            replay=True,
            state_patch=patch,
        ).run
        RunReplay.objects.create(
            run_id=fork.run_id,
            tenant_id=original.tenant_id,
            original_run_id=original.run_id,
            at_seq=seq,
            eval_round=eval_round,
            overrides={**run_with, "shown": shown},
        )
    return fork


def replay_feed(run_id: UUID) -> bool:
    """If this replay waits for the customer's next message, give it the original's next one (in the
    caller's tenant). False when there is none left: the replay has answered everything."""
    run = AgentRun.objects.filter(run_id=run_id).select_related("tenant").first()
    if run is None or run.status != RunStatus.SUSPENDED or run.suspend_reason != AWAITING_INPUT:
        return False
    if run.resume_requested_at is not None:  # fed already, not answered yet: one message at a time
        return False
    replay = RunReplay.objects.filter(run_id=run_id, tenant_id=run.tenant_id).first()
    if replay is None:
        return False
    fed = set(
        AgentEvent.objects.filter(
            run_id=run_id, tenant_id=run.tenant_id, client_message_id__startswith=FED_PREFIX
        ).values_list("client_message_id", flat=True)
    )
    later = AgentEvent.objects.filter(
        run_id=replay.original_run_id,
        tenant_id=run.tenant_id,
        seq__gt=replay.at_seq,
        event_type="user_message",
    ).order_by("seq")
    for message in later:
        key = f"{FED_PREFIX}{message.seq}"
        content = (message.payload or {}).get("content")
        if key in fed or not isinstance(content, str) or not content.strip():
            continue
        conversation_append(
            tenant=run.tenant,
            run_id=run_id,
            event_type="user_message",
            client_message_id=key,
            body={"content": content},
            actor=f"replay:{replay.original_run_id}",
        )
        return True
    return False


# --- evaluation sets -------------------------------------------------------------------------------


@tenant_of_call
def eval_set_create(*, tenant: Tenant, name: str, actor: str, description: str = "") -> EvalSet:
    name = (name or "").strip()
    if not 0 < len(name) <= 200:
        raise InvalidInput("an evaluation set's name is 1 to 200 characters", code="invalid_name")
    if len(description) > 2000:
        raise InvalidInput("a description is at most 2000 characters", code="invalid_description")
    try:
        with transaction.atomic():
            return EvalSet.objects.create(tenant=tenant, name=name, description=description, created_by=actor)
    except IntegrityError:
        raise EvalSetNameTaken(f"this tenant already has an evaluation set named {name!r}") from None


@tenant_of_call
def eval_set_get(*, tenant: Tenant, set_id: UUID | None = None, name: str | None = None) -> EvalSet:
    found = EvalSet.objects.filter(tenant=tenant)
    found = found.filter(set_id=set_id) if set_id is not None else found.filter(name=name)
    eval_set = found.first()
    if eval_set is None:
        raise EvalSetNotFound(f"no evaluation set {set_id or name!r} in tenant {tenant.slug}")
    return eval_set


def eval_set_run_add(*, eval_set: EvalSet, run_id: UUID, actor: str, at_seq: int | None = None) -> EvalSetRun:
    """Keep a run of the set's tenant in the set (again: its fork point changes). Replays are not
    kept: they are results. A run of another tenant does not exist here."""
    with tenant_bind(eval_set.tenant_id):
        run = AgentRun.objects.filter(run_id=run_id, tenant_id=eval_set.tenant_id).first()
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        if run.replay:
            raise ReplayOfReplay(f"run {run_id} is a replay; keep its original run in the set")
        seq = _at_seq(run, at_seq)
        if EvalSetRun.objects.filter(eval_set=eval_set, tenant_id=eval_set.tenant_id).count() >= MAX_SET_RUNS:
            raise InvalidInput(f"an evaluation set holds at most {MAX_SET_RUNS} runs", code="eval_set_full")
        member, _ = EvalSetRun.objects.update_or_create(
            eval_set=eval_set,
            run_id=run.run_id,
            defaults={"tenant_id": eval_set.tenant_id, "at_seq": seq, "added_by": actor},
        )
    return member


@tenant_of_call
def eval_round_start(
    *,
    actor: str,
    overrides: dict[str, Any] | None,
    eval_set: EvalSet | None = None,
    run_id: UUID | None = None,
    at_seq: int | None = None,
    label: str = "",
) -> EvalRound:
    """Replay every run of the set (or the one run) with these overrides, as one round."""
    _, shown = overrides_parse(overrides)  # refused before anything is written
    if len(label) > 200:
        raise InvalidInput("a label is at most 200 characters", code="invalid_label")
    if eval_set is None and run_id is None:
        raise InvalidInput("name an evaluation set or a run", code="nothing_to_replay")
    members: list[tuple[UUID, int | None]]
    if eval_set is not None:
        members = [
            (m.run_id, int(m.at_seq))
            for m in EvalSetRun.objects.filter(eval_set=eval_set, tenant_id=eval_set.tenant_id)
        ]
        if not members:
            raise InvalidInput(f"evaluation set {eval_set.name!r} holds no runs", code="eval_set_empty")
        tenant_id = eval_set.tenant_id
    else:
        assert run_id is not None
        original = run_get(run_id=run_id)
        members, tenant_id = [(original.run_id, at_seq)], original.tenant_id
    with tenant_bind(tenant_id), transaction.atomic():
        eval_round = EvalRound.objects.create(
            tenant_id=tenant_id, eval_set=eval_set, label=label, overrides=shown, started_by=actor
        )
        for member_run, seq in members:
            replay_start(
                run_id=member_run, at_seq=seq, overrides=overrides, actor=actor, eval_round=eval_round
            )
    return eval_round
