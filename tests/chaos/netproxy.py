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


class _Frontend:
    """Splits what a PostgreSQL client sends into protocol messages, to name the statements
    (simple-query ``Q`` and parse ``P`` messages) a stalled client delivers late.

    A connection starts with untyped messages (SSLRequest, StartupMessage: int32 length
    first); every message after the StartupMessage is a type byte and an int32 length.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        statements = []
        while True:
            head = 4 if not self._started else 5
            if len(self._buffer) < head:
                return statements
            if not self._started:
                length = int.from_bytes(self._buffer[:4], "big")
                if len(self._buffer) < length:
                    return statements
                code = int.from_bytes(self._buffer[4:8], "big")
                self._started = code == 196608  # protocol 3.0: the StartupMessage
                self._buffer = self._buffer[length:]
                continue
            kind = self._buffer[:1]
            length = int.from_bytes(self._buffer[1:5], "big")
            if len(self._buffer) < 1 + length:
                return statements
            payload = self._buffer[5 : 1 + length]
            self._buffer = self._buffer[1 + length :]
            if kind == b"Q":
                statements.append(payload.rstrip(b"\0").decode(errors="replace"))
            elif kind == b"P":  # name NUL query NUL ...
                statements.append(payload.split(b"\0")[1].decode(errors="replace"))


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket, partitioned: bool) -> None:
        self.client = client
        self.server = server
        # Opened or alive during a partition.
        self.saw_partition = partitioned
        # Wrote during the partition: its first chunk forwarded after the heal is "late".
        self.late = False
        self.frontend = _Frontend()

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


class PartitionProxy:
    """``proxy.port`` forwards to ``target``; ``partition()`` / ``heal()``; counts of what
    crossed it: ``accepted``, ``opened_during_partition``, ``late_bytes`` (what clients wrote
    during the partition, forwarded after the heal), ``late_links`` and ``late_statements``
    (the SQL in those bytes)."""

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
        # The statements those connections delivered after a heal (SQL text), in order.
        self.late_statements: list[str] = []
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
        """Forward again, everything written meanwhile included. What a connection wrote
        during the partition (unread in its socket now) is counted as late: its first
        chunk forwarded from now on."""
        with self._lock:
            for link in self._links:
                try:
                    waiting, _, _ = select.select([link.client], [], [], 0)
                except (OSError, ValueError):
                    waiting = []
                link.late = bool(waiting)
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

    def _spawn(self, target, *args) -> None:
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
                statements = link.frontend.feed(data) if upstream else []
                sink.sendall(data)
                if upstream and link.late:
                    with self._lock:
                        link.late = False
                        self.late_bytes += len(data)
                        self.late_links.add(id(link))
                        self.late_statements += statements
            except (OSError, ValueError):  # ValueError: the other direction closed the link
                break
        link.close()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
