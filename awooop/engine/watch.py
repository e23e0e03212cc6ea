"""The reaper's judgement of worker liveness: only what it saw with its own eyes, on its own clock.

Each pass reads the liveness token of every worker holding a RUNNING run (its row's
``seen_at``, which every beat changes). The watch remembers, per worker, the token and when
it first saw it — on this process's monotonic clock, taken after the read returned, so the
beat that wrote the token had started before. A worker whose token the watch has seen
unchanged for ``dead_after`` seconds is judged dead; the reap statement takes its runs only
if the token is still the same (a beat that committed meanwhile saves it).

No database time enters the judgement, so a step of the database's clock, a restart, or a
failover to a standby with an old start time never makes live workers look dead. What the
watch saw is forgotten when a pass fails or another server (or database) answers: after a
restart or a failover it starts watching afresh, and workers whose beats could not commit
meanwhile get ``dead_after`` seconds again. A new maintenance process starts with nothing
seen, which only delays a judgement. The rule this keeps is :mod:`awooop.domain.timing`'s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime

Clock = Callable[[], float]


class WorkerWatch:
    def __init__(self, dead_after: float, clock: Clock = time.monotonic) -> None:
        self.dead_after = dead_after
        self._clock = clock
        self._server: str | None = None
        # worker id -> (token, when this watch first saw that token)
        self._seen: dict[str, tuple[datetime, float]] = {}

    def observe(self, server: str, tokens: Mapping[str, datetime]) -> None:
        """Record a read of ``tokens`` that has just returned from ``server``."""
        at = self._clock()
        if server != self._server:
            self._seen.clear()
            self._server = server
        seen = {}
        for worker_id, token in tokens.items():
            before = self._seen.get(worker_id)
            seen[worker_id] = before if before is not None and before[0] == token else (token, at)
        self._seen = seen

    def dead(self) -> dict[str, datetime]:
        """The workers whose token has not changed for ``dead_after`` seconds, with that
        token (to compare-and-set on). Read right before the statement that acts on it."""
        now = self._clock()
        return {w: token for w, (token, at) in self._seen.items() if now - at >= self.dead_after}

    def forget(self) -> None:
        """A pass failed: what was seen may no longer say anything about the workers."""
        self._seen.clear()
        self._server = None


_watch: tuple[int, WorkerWatch] | None = None


def watch(dead_after: float) -> WorkerWatch:
    """This process's watch (a forked child gets its own; a new ``dead_after`` starts anew)."""
    global _watch
    if _watch is None or _watch[0] != os.getpid() or _watch[1].dead_after != dead_after:
        _watch = (os.getpid(), WorkerWatch(dead_after))
    return _watch[1]
