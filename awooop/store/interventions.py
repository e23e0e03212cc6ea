"""SQL fragments for the approval rows a run's hand-over to a person leaves behind.

An escalation (manual intervention) opens an ``awooop_approval`` row of kind
``intervention``: the person's task, with the reason, no expiry, decided through the
management operations (never by a token — none is issued; the row's hash is of random bytes
nobody holds). When an operator resolves it, or a run stops waiting for any other reason (a
cancel, the run deadline, a conflict), the pending rows are settled in the same statement:
an intervention as the operator's decision, an approval as ``SUPERSEDED``.

Each fragment is a CTE body over a CTE named ``changed`` of the enclosing statement.
"""

from __future__ import annotations

# ``changed`` returns run_id, project_id, current_step, failure_reason.
OPEN_FROM_CHANGED = """
    INSERT INTO awooop_approval
        (token_hash, project_id, run_id, step, action, kind, prompt, expires_at)
    SELECT encode(sha256(convert_to(CAST(gen_random_uuid() AS text), 'UTF8')), 'hex'),
           project_id, run_id, COALESCE(current_step, ''), 'manual-intervention',
           'intervention', COALESCE(failure_reason, ''), NULL
    FROM changed
"""

# ``changed`` returns run_id; :via names who settled them (operator, timer, tool).
SUPERSEDE_PENDING = """
    UPDATE awooop_approval a
    SET status = 'SUPERSEDED', decided_via = CAST(:via AS text), decided_at = now()
    FROM changed c
    WHERE a.run_id = c.run_id AND a.status = 'PENDING'
"""
