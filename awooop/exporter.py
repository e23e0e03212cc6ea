"""The metrics endpoint of a Celery worker or beat (``AWOOOP_METRICS_PORT``).

On a host of its own a worker's counters cannot reach a web server's ``/metrics``, so the
worker serves them itself: prometheus_client's HTTP server, on a thread of the worker's main
process, answers every scrape with the sum of the metric files in its
``PROMETHEUS_MULTIPROC_DIR`` — its own, and those of its prefork pool children, live and dead
(a child that died or was replaced keeps its counts, or the sums would go down). The directory
is the process's alone (:func:`awooop.metric_files.own`). Beat does the same with its one
process.

The server's socket is bound before the pool forks its children; each child closes its copy
at once, so only the main process ever answers on the port.
"""

from __future__ import annotations

import os
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from awooop.config import ConfigError


class Endpoint:
    """A running endpoint; :meth:`stop` closes it."""

    def __init__(self, server: WSGIServer, address: str, port: int) -> None:
        self._server = server
        self.address = address
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start(directory: str, address: str, port: int) -> Endpoint:
    """Serve the sum of ``directory``'s metric files on ``address:port`` (any path answers)."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=directory)
    try:
        server, _ = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"AWOOOP_METRICS_ADDRESS={address}, AWOOOP_METRICS_PORT={port}: cannot listen there "
            f"({exc.strerror or exc}); each worker and beat on a host needs a port of its own"
        ) from exc
    # A forked child (a pool process) must not keep the listening socket open.
    os.register_at_fork(after_in_child=server.socket.close)
    return Endpoint(server, address, port)
