"""A loopback TCP proxy that can be partitioned: it stops forwarding on every connection,
open or new, without closing any — the way a network partition looks to both ends (no RST,
no FIN; the kernel still acknowledges what the client sends, so keepalives and
``tcp_user_timeout`` see a healthy peer). :meth:`PartitionProxy.heal` resumes forwarding,
delivering whatever the client wrote meanwhile: the stalled process's late statements reach
the server then, which is what a fenced write must survive.

Unlike :class:`tests.support.proxy.StallingProxy` (which freezes only the connections open
when it stalls), a fresh connection made during a partition gets nowhere either, so a lease
keeper cannot renew on a new connection.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

_CHUNK = 65536
_POLL_SECONDS = 0.02


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket, partitioned: bool) -> None:
        self.client = client
        self.server = server
        # Opened or alive during a partition: what it forwards after the heal is "late".
        self.saw_partition = partitioned

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


class PartitionProxy:
    """``proxy.port`` forwards to ``target``; ``partition()`` / ``heal()``; counts of what
    crossed it: ``accepted``, ``opened_during_partition``, ``late_bytes`` (client → server
    bytes forwarded after a heal by connections that lived through the partition)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_SECONDS)
        self._closed = threading.Event()
        self._partitioned = threading.Event()
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        self.opened_during_partition = 0
        self.late_bytes = 0
        self.late_links: set[int] = set()
        self._spawn(self._accept)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def partitioned(self) -> bool:
        return self._partitioned.is_set()

    def partition(self) -> None:
        """Stop forwarding on every connection, open or opened from now on; close none."""
        with self._lock:
            self._partitioned.set()
            for link in self._links:
                link.saw_partition = True

    def heal(self) -> None:
        """Forward again, everything written meanwhile included."""
        self._partitioned.clear()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> PartitionProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _spawn(self, target, *args) -> None:  # type: ignore[no-untyped-def]
        thread = threading.Thread(target=target, args=args, daemon=True, name="partition-proxy")
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                link = _Link(client, server, self._partitioned.is_set())
                self._links.append(link)
                self.accepted += 1
                self.opened_during_partition += link.saw_partition
            self._spawn(self._pump, link, client, server, True)
            self._spawn(self._pump, link, server, client, False)

    def _pump(
        self, link: _Link, source: socket.socket, sink: socket.socket, upstream: bool
    ) -> None:
        while not self._closed.is_set():
            if self._partitioned.is_set():
                # Read nothing, forward nothing, close nothing.
                self._closed.wait(_POLL_SECONDS)
                continue
            try:
                ready, _, _ = select.select([source], [], [], _POLL_SECONDS)
                if not ready:
                    continue
                if self._partitioned.is_set():
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
                if upstream and link.saw_partition:
                    with self._lock:
                        self.late_bytes += len(data)
                        self.late_links.add(id(link))
            except OSError:
                break
        link.close()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
