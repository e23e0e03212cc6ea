"""``awooop_worker``: one row per worker process that has held a lease.

Who writes it: the process's lease keeper, which inserts the row on first use and sets
``seen_at = now()`` every ``AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS`` (a beat; ``seen_at``
is the token that tells one beat from the next). Who reads it: the reaper, which takes the
RUNNING runs of a worker whose token it has itself seen unchanged for
``AWOOOP_WORKER_DEAD_AFTER_SECONDS`` (a dead process stops beating; a slow step does not),
and stamps ``judged_dead_at``. Who deletes it: the reaper's pass, once the row is older than
``AWOOOP_WORKER_PRUNE_AFTER_SECONDS`` and its worker holds no run.
"""

from datetime import datetime

from sqlalchemy import DateTime, Integer, String, func
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class Worker(Base):
    __tablename__ = "awooop_worker"

    # host:pid:boot-nonce, as written to awooop_run_state.worker_id.
    worker_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(64), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    started_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    seen_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # Set by the reaper when it judges the worker dead (and takes its runs); returned to the
    # worker by its next beat, which then treats the leases it held as lost.
    judged_dead_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
