"""The run kernel: the only writer of agent_runs and agent_events, and the step decisions.

- `moves`: a typed record for every way a run moves (a step committed, a run suspended, a resume
  verified, a signal delivered, a subject erased, a person's transition...).
- `apply(move)`: writes one move as one statement, fenced by lease, revision or status; nothing
  else writes the run tables (a test and an import contract hold it). Its SQL is in `_sql/`; what a
  lease holder's move sends and which webhook event it derives, in `params`.
- `decide`: the pure decisions both drivers call (Keeper's Celery workers in runs.engine.steps, the
  HTTP worker protocol in runs.external.protocol): what a lease grant, a verification and a step's
  outcome become. `verify`: resume verification's checks, decided over facts.
- `outcomes`: Next, Suspend, Complete, Fail: what a step decides, in every driver's words.
"""

from __future__ import annotations

from runs.kernel.params import webhook_event_type
from runs.kernel.writer import apply

__all__ = ["apply", "webhook_event_type"]
