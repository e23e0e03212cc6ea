"""The two axes of run state and the tables of allowed transitions.

``status`` is the runtime contract — who holds the run. ``saga_status`` is the
orchestrator's business state — where the process is. Each axis has one table of the moves
allowed on it; a finished run (a terminal ``status``) moves on neither. Store modules consult
:func:`check_transition` for the moves their statements make, and each statement repeats the
``from`` state in its WHERE clause, so the database refuses a race too. The test database
enforces both tables with a trigger on every statement the suite runs.
"""

from __future__ import annotations

PENDING = "PENDING"
RUNNING = "RUNNING"
WAITING_TOOL = "WAITING_TOOL"
WAITING_APPROVAL = "WAITING_APPROVAL"
RESUMED = "RESUMED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"

RUN_STATUSES = (
    PENDING,
    RUNNING,
    WAITING_TOOL,
    WAITING_APPROVAL,
    RESUMED,
    COMPLETED,
    FAILED,
    CANCELLED,
)
TERMINAL_STATUSES = (COMPLETED, FAILED, CANCELLED)
UNFINISHED_STATUSES = tuple(s for s in RUN_STATUSES if s not in TERMINAL_STATUSES)

SAGA_STATUSES = (
    "RUNNING",
    "CANCELLING",
    "WAITING_RESOLUTION",
    "COMPENSATING",
    "COMPENSATED",
    "COMPLETED",
    "MANUAL_INTERVENTION",
    "MANUALLY_CLOSED",
)
CONTROL_STATES = ("ACTIVE", "PAUSED")
DIRECTIONS = ("FORWARD", "BACKWARD")

# from status -> statuses it may move to: exactly the moves the statements make, each with
# the statement that makes it. Anything else is refused (by the test database's trigger too).
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    # claim; a conflicting result (store/tools.py)
    PENDING: frozenset({RUNNING, WAITING_APPROVAL}),
    RESUMED: frozenset({RUNNING, WAITING_APPROVAL}),
    # segment ends and releases (worker); reaper; step timeout (timer); conflicting result
    RUNNING: frozenset({PENDING, WAITING_TOOL, WAITING_APPROVAL, COMPLETED, FAILED, CANCELLED}),
    # the tool result or its timeout (a cancel or the deadline waits for them too);
    # a conflicting result
    WAITING_TOOL: frozenset({PENDING, WAITING_APPROVAL}),
    # a decision, the expiry, an operator's retry, cancel or the deadline (RESUMED); manual
    # close (CANCELLED)
    WAITING_APPROVAL: frozenset({RESUMED, CANCELLED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
# A conflicting outcome (two results for one attempt) hands an unfinished run to a person
# from wherever it is: the ``WAITING_APPROVAL`` entries above for PENDING, RESUMED and
# WAITING_TOOL exist for that statement alone (store/tools.py).
ESCALATABLE_STATUSES = tuple(
    s for s in RUN_STATUSES if s == WAITING_APPROVAL or WAITING_APPROVAL in ALLOWED_TRANSITIONS[s]
)

# from saga_status -> saga statuses it may move to. Anything else is refused.
ALLOWED_SAGA_TRANSITIONS: dict[str, frozenset[str]] = {
    # cancel / deadline; unknown outcome; turn back; end; a person must look
    "RUNNING": frozenset(
        {
            "CANCELLING",
            "WAITING_RESOLUTION",
            "COMPENSATING",
            "COMPENSATED",
            "COMPLETED",
            "MANUAL_INTERVENTION",
        }
    ),
    # the resolver settled it (and the saga goes on, turns back or ends); cancel / deadline
    "WAITING_RESOLUTION": frozenset(
        {
            "RUNNING",
            "CANCELLING",
            "COMPENSATING",
            "COMPENSATED",
            "COMPLETED",
            "MANUAL_INTERVENTION",
        }
    ),
    # the worker turns back at its next step boundary, once every step's outcome is known;
    # a step in doubt that nothing settles goes to a person
    "CANCELLING": frozenset({"COMPENSATING", "COMPENSATED", "MANUAL_INTERVENTION"}),
    "COMPENSATING": frozenset({"COMPENSATED", "MANUAL_INTERVENTION"}),
    # an operator's retry compensation / retry resolution (back to the cancel that waited
    # for it, if any) / manual close
    "MANUAL_INTERVENTION": frozenset(
        {"COMPENSATING", "WAITING_RESOLUTION", "CANCELLING", "MANUALLY_CLOSED"}
    ),
    "COMPENSATED": frozenset(),
    "COMPLETED": frozenset(),
    "MANUALLY_CLOSED": frozenset(),
}


class IllegalTransition(ValueError):
    """A run cannot move from one status to another."""

    def __init__(self, from_status: str, to_status: str) -> None:
        super().__init__(f"run status {from_status} cannot move to {to_status}")
        self.from_status = from_status
        self.to_status = to_status


def can_transition(from_status: str, to_status: str) -> bool:
    return to_status in ALLOWED_TRANSITIONS.get(from_status, frozenset())


def check_transition(from_status: str, to_status: str) -> None:
    if not can_transition(from_status, to_status):
        raise IllegalTransition(from_status, to_status)
