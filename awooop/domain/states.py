"""The two axes of run state (DESIGN §4) and the one table of allowed transitions.

``status`` is ADR-114 D4's runtime contract — who holds the run. ``saga_status`` is the
orchestrator's business state — where the process is. Store functions consult
:func:`check_transition` before building a transition statement, and the statement itself
repeats the ``from`` status in its WHERE clause, so the database refuses a race too.
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
CLAIMABLE_STATUSES = (PENDING, RESUMED)
TERMINAL_STATUSES = (COMPLETED, FAILED, CANCELLED)

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

# from status -> statuses it may move to. Anything else is refused.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({RUNNING, FAILED, CANCELLED}),
    RESUMED: frozenset({RUNNING, FAILED, CANCELLED}),
    RUNNING: frozenset({PENDING, WAITING_TOOL, WAITING_APPROVAL, COMPLETED, FAILED, CANCELLED}),
    WAITING_TOOL: frozenset({PENDING, RESUMED, FAILED, CANCELLED}),
    WAITING_APPROVAL: frozenset({RESUMED, FAILED, CANCELLED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
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
