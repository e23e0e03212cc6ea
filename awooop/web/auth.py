"""Project routes and credential hashes for ingress, cached briefly per web process.

Every admission needs them; reading them once per ``auth_cache_seconds`` instead of once per
request saves a database round trip on the hot path. Unknown projects are cached too, so a
flood of requests for made-up projects does not reach the database either. A caller that is
about to refuse an authenticated request on what it read (a workflow not allowed) reads again
with ``fresh=True`` first: an operator who just allowed it is not answered from the cache.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import cast

from cachetools import TTLCache

from awooop import metrics
from awooop.db import Connects
from awooop.models.project import PROJECT_ID_PATTERN
from awooop.store import projects

_PROJECT_ID = re.compile(PROJECT_ID_PATTERN)
_MISSING = object()  # None is a cached answer: an unknown project


class ProjectAuthCache:
    def __init__(
        self,
        ttl_seconds: float,
        maxsize: int = 4096,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl_seconds
        self._cache: TTLCache[tuple[str, str], projects.ProjectAuth | None] = TTLCache(
            maxsize=maxsize, ttl=max(ttl_seconds, 0.001), timer=timer
        )
        self._lock = threading.Lock()

    def load(
        self, connects: Connects, project_id: str, channel: str, fresh: bool = False
    ) -> projects.ProjectAuth | None:
        """The project's auth for ``channel``: the kept copy while it is young enough, unless
        ``fresh`` (then read on a connection of ``connects``, and kept for the next
        requests)."""
        if not _PROJECT_ID.fullmatch(project_id):
            return None  # no project has this id (and PostgreSQL could not even compare it)
        key = (project_id, channel)
        if self._ttl > 0 and not fresh:
            with self._lock:
                # One get: TTLCache reads its clock once for it. `key in cache` then
                # `cache[key]` reads it twice, and an entry expiring in between was a KeyError.
                cached = self._cache.get(key, _MISSING)
                if cached is not _MISSING:
                    return cast(projects.ProjectAuth | None, cached)
        with connects.connect() as conn:
            auth = projects.load_auth(conn, project_id, channel)
        metrics.PROJECT_AUTH_LOADS.inc()
        if self._ttl > 0:
            with self._lock:
                self._cache[key] = auth
        return auth
