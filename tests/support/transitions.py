"""The state machine as a database trigger, for the test template database only.

Every ``(status, saga_status)`` change any statement makes to ``awooop_run_state`` is checked
against the tables in :mod:`awooop.domain.states`, so the whole suite checks
every statement it runs; a move the tables do not list fails the statement with
``check_violation`` and a message naming it. Production databases do not carry it: the
statements enforce the same rules in their WHERE clauses, and this is how the suite proves
that they do.
"""

from __future__ import annotations

from awooop.domain import states


def _moves(table: dict[str, frozenset[str]]) -> str:
    pairs = sorted(f"{a}>{b}" for a, targets in table.items() for b in targets)
    return ", ".join(f"'{p}'" for p in pairs)


def trigger_sql() -> str:
    terminal = ", ".join(f"'{s}'" for s in states.TERMINAL_STATUSES)
    return f"""
CREATE FUNCTION awooop_test_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, OLD.saga_status) IS NOT DISTINCT FROM (NEW.status, NEW.saga_status) THEN
        RETURN NEW;
    END IF;
    IF OLD.status IN ({terminal})
       OR (OLD.status <> NEW.status
           AND NOT (OLD.status || '>' || NEW.status)
                   = ANY (ARRAY[{_moves(states.ALLOWED_TRANSITIONS)}]))
       OR (OLD.saga_status <> NEW.saga_status
           AND NOT (OLD.saga_status || '>' || NEW.saga_status)
                   = ANY (ARRAY[{_moves(states.ALLOWED_SAGA_TRANSITIONS)}]))
    THEN
        RAISE EXCEPTION 'illegal run transition (%, %) -> (%, %) of run %',
            OLD.status, OLD.saga_status, NEW.status, NEW.saga_status, OLD.run_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER awooop_test_check_transition
    BEFORE UPDATE OF status, saga_status ON awooop_run_state
    FOR EACH ROW EXECUTE FUNCTION awooop_test_check_transition();
"""
