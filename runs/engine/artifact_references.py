"""What in the run tables refers to stored blobs (core.artifacts asks every kind before it deletes
one): long tool results' content_ref, and the references a run's state, result and event states hold.
The workspace's own kind is registered by runs/engine/workspace.py."""

from __future__ import annotations

from core.artifacts import ReferencePlace, artifact_references_register

# The digests tool results keep (a conversation's event and every fork's copy of it).
TOOL_RESULT_REFERENCES = """
    SELECT e.payload -> 'content_ref' ->> 'digest' FROM agent_events e
     WHERE e.tenant_id = %(tenant)s AND e.event_type = 'tool_result' AND e.payload ? 'content_ref'
       AND NOT (e.run_id = ANY(%(except_runs)s::uuid[]))
"""
# The digests of {"digest": "sha256:..."} objects anywhere in a run's state and result, and in the
# copies of its state events keep (a fork starts from one). Rows that name no digest are skipped by
# their text first (cheaper than walking every state).
STATE_REFERENCES = """
    SELECT d #>> '{}' FROM agent_runs r
           CROSS JOIN LATERAL jsonb_path_query(jsonb_build_array(r.state, r.result), 'lax $.**.digest') d
     WHERE r.tenant_id = %(tenant)s AND NOT (r.run_id = ANY(%(except_runs)s::uuid[]))
       AND (r.state::text LIKE '%%"digest"%%' OR r.result::text LIKE '%%"digest"%%')
    UNION ALL
    SELECT d #>> '{}' FROM agent_events e CROSS JOIN LATERAL jsonb_path_query(e.state, 'lax $.**.digest') d
     WHERE e.tenant_id = %(tenant)s AND e.state IS NOT NULL AND NOT (e.run_id = ANY(%(except_runs)s::uuid[]))
       AND e.state::text LIKE '%%"digest"%%'
"""


def register() -> None:
    """Called from RunsConfig.ready."""
    artifact_references_register(
        ReferencePlace(kind="tool_result", what="long tool results (content_ref)", sql=TOOL_RESULT_REFERENCES)
    )
    artifact_references_register(
        ReferencePlace(
            kind="run_state", what="blobs a run's state, result or event states name", sql=STATE_REFERENCES
        )
    )
