"""Test servers (``socketserver`` and its HTTP and WSGI subclasses) on a thread of their own."""

from __future__ import annotations

import socketserver
import threading

# How often serve_forever looks for shutdown(): at the default half second, every test that
# stops a server waits up to that long in its teardown.
SHUTDOWN_POLL_SECONDS = 0.02


def start(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Serve ``server`` on a daemon thread; its ``shutdown()`` then returns within 20 ms."""
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        daemon=True,
        name=name,
    )
    thread.start()
    return thread
