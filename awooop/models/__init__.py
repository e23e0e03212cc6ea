"""SQLAlchemy 2 table definitions — no queries and no behaviour live here.

Alembic's ``env.py`` targets :data:`metadata`; ``tests/migrations`` checks that the
migrations and these models do not drift.
"""

from awooop.models.approval import Approval
from awooop.models.base import Base, metadata
from awooop.models.dedupe import ChannelEventDedupe
from awooop.models.inbox import InboxEntry
from awooop.models.outbox import OutboxMessage
from awooop.models.project import Credential, Project
from awooop.models.run import RunEvent, RunState
from awooop.models.signal import Signal
from awooop.models.timer import Timer
from awooop.models.worker import Worker

__all__ = [
    "Approval",
    "Base",
    "ChannelEventDedupe",
    "Credential",
    "InboxEntry",
    "OutboxMessage",
    "Project",
    "RunEvent",
    "RunState",
    "Signal",
    "Timer",
    "Worker",
    "metadata",
]
