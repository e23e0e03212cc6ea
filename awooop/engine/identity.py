"""The worker identity written to ``worker_id``: host:pid:boot-nonce, unique per process."""

from __future__ import annotations

import os
import secrets
import socket

_cache: tuple[int, str] | None = None


def worker_id() -> str:
    """This process's id; recomputed after a fork (the pid changes)."""
    global _cache
    pid = os.getpid()
    if _cache is None or _cache[0] != pid:
        host = socket.gethostname()[:64]
        _cache = (pid, f"{host}:{pid}:{secrets.token_hex(4)}")
    return _cache[1]
