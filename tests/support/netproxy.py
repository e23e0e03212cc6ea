"""A userspace TCP proxy that injects network faults on the connections it carries.

:class:`FaultProxy` listens on ``listen_host:listen_port`` (loopback by default; a bridge
address puts it on the path between network-namespace hosts, see ``tests/cluster``) and
forwards each connection to ``target``. Faults, each until :meth:`FaultProxy.heal`:

- :meth:`~FaultProxy.partition` — forwarding stops on every connection, open or opened from
  now on, and nothing is closed: what a network partition looks like to both ends (no RST,
  no FIN; the proxy's kernel still acknowledges what a client sends, so keepalives and
  ``tcp_user_timeout`` see a healthy peer). A fresh connection gets nowhere either.
- :meth:`~FaultProxy.stall` — only the connections open now freeze (half-open); connections
  made afterwards are forwarded, so a client that gives up and reconnects gets through.
- :meth:`~FaultProxy.delay` — every chunk, each way, is held ``mean ± jitter`` seconds
  (uniform), order kept: a slow, jittery link.
- :meth:`~FaultProxy.drop` — every open connection is reset (RST to both ends), and so is
  every new one: a peer that refuses (a firewall rejecting, a stateful middlebox that lost
  its table).

:meth:`~FaultProxy.heal` lifts a partition, a stall and a drop (not a delay: ``delay(0)``);
``heal(reset=True)`` resets the connections the fault froze instead of resuming them, so the
clients must reconnect. What a connection wrote during a partition or stall and delivers
after the heal is counted as *late* (``late_bytes``, ``late_links``), and when the target is
PostgreSQL the SQL in it is kept (``late_statements``): the stalled process's late writes,
which a fenced write must survive.

Threads and sockets only; everything stops on :meth:`FaultProxy.close`.
"""

from __future__ import annotations

import collections
import contextlib
import random
import select
import socket
import struct
import threading
import time

_CHUNK = 65536
_POLL_SECONDS = 0.02


class _Frontend:
    """Splits what a PostgreSQL client sends into protocol messages, to name the statements
    (simple-query ``Q`` and parse ``P`` messages) a stalled client delivers late.

    A connection starts with untyped messages (SSLRequest, StartupMessage: int32 length
    first); every message after the StartupMessage is a type byte and an int32 length.
    Bytes of any other protocol yield nothing useful, and harm nothing.
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
                if len(self._buffer) < length or length < 8:
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
    """One proxied connection: the client's socket, the target's, and its fault state."""

    def __init__(self, client: socket.socket, server: socket.socket, partitioned: bool) -> None:
        self.client = client
        self.server = server
        self.stalled = False
        # Opened or alive during a partition.
        self.saw_partition = partitioned
        # Wrote during a partition or stall: its first chunk forwarded after the heal is late.
        self.late = False
        self.frontend = _Frontend()
        self.closed = threading.Event()

    def close(self, reset: bool = False) -> None:
        for sock in (self.client, self.server):
            if reset:
                _reset_socket(sock)
            with contextlib.suppress(OSError):
                sock.close()
        self.closed.set()


def _reset_socket(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


class FaultProxy:
    """``proxy.address`` (host, port) forwards to ``target``; see the module docstring.

    Counts: ``accepted``, ``opened_during_partition``, ``reset_links`` (by :meth:`drop` or
    ``heal(reset=True)``), ``delayed_chunks``, ``late_bytes``, ``late_links``,
    ``late_statements``.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str = "proxy",
        seed: int | None = None,
    ) -> None:
        self.name = name
        self._target = (target_host, target_port)
        self._listener = socket.create_server((listen_host, listen_port))
        self._listener.settimeout(_POLL_SECONDS)
        self._closed = threading.Event()
        self._partitioned = threading.Event()
        self._dropping = threading.Event()
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._delay = (0.0, 0.0)
        self._links: list[_Link] = []
        # Clients accepted during a partition, not yet connected to the target.
        self._pending: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        self.opened_during_partition = 0
        self.reset_links = 0
        self.delayed_chunks = 0
        self.late_bytes = 0
        self.late_links: set[int] = set()
        # The statements those connections delivered after a heal (SQL text), in order.
        self.late_statements: list[str] = []
        self._spawn(self._accept)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def partitioned(self) -> bool:
        return self._partitioned.is_set()

    # --- faults ------------------------------------------------------------------------

    def partition(self) -> None:
        """Stop forwarding on every connection, open or opened from now on; close none."""
        with self._lock:
            self._partitioned.set()
            for link in self._links:
                link.saw_partition = True

    def stall(self) -> None:
        """Stop forwarding on every connection open now, closing none of them; connections
        made afterwards are forwarded."""
        with self._lock:
            for link in self._links:
                link.stalled = True

    def delay(self, mean: float, jitter: float = 0.0) -> None:
        """Hold every chunk, each way, ``mean ± jitter`` seconds (uniform; order kept).
        ``delay(0)`` forwards at once again."""
        if mean < 0 or jitter < 0 or jitter > mean:
            raise ValueError("need 0 <= jitter <= mean")
        with self._lock:
            self._delay = (mean, jitter)

    def drop(self) -> None:
        """Reset every open connection and every new one, until :meth:`heal`."""
        self._dropping.set()
        self._reset(lambda link: True)

    def heal(self, reset: bool = False) -> None:
        """Lift a partition, the stalls and a drop. What a frozen connection wrote meanwhile
        (unread in its socket now) is forwarded and counted as late; with ``reset`` those
        connections are reset instead (the clients must reconnect)."""
        if reset:
            self._reset(lambda link: link.stalled or self._partitioned.is_set())
            with self._lock:
                pending, self._pending = list(self._pending), set()
                self.reset_links += len(pending)
            for client in pending:
                _reset_socket(client)
        with self._lock:
            for link in self._links:
                try:
                    waiting, _, _ = select.select([link.client], [], [], 0)
                except (OSError, ValueError):
                    waiting = []
                link.late = bool(waiting) and (link.stalled or self._partitioned.is_set())
                link.stalled = False
            self._partitioned.clear()
            self._dropping.clear()

    def _reset(self, which) -> None:
        with self._lock:
            chosen = [link for link in self._links if which(link)]
            self.reset_links += len(chosen)
        for link in chosen:
            link.close(reset=True)

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=self.name)
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._dropping.is_set():
                _reset_socket(client)
                with self._lock:
                    self.reset_links += 1
                continue
            with self._lock:
                deferred = self._partitioned.is_set()
                if deferred:  # taken now, connected after the heal
                    self.accepted += 1
                    self._pending.add(client)
            if deferred:
                self._spawn(self._open_after_heal, client)
            else:
                self._open(client, during_partition=False)

    def _open_after_heal(self, client: socket.socket) -> None:
        """A connection made during a partition reaches the target only after the heal, as
        its SYN would in a real one (a server that saw it would hold a backend waiting for a
        startup packet that never comes, and PostgreSQL's fast shutdown waits up to
        authentication_timeout for it). ``heal(reset=True)`` or a drop resets it instead."""
        while self._partitioned.is_set() and not self._closed.is_set():
            if self._dropping.is_set():
                break
            self._closed.wait(_POLL_SECONDS)
        with self._lock:
            if client not in self._pending:  # reset by heal(reset=True)
                return
            self._pending.discard(client)
            reset = self._dropping.is_set()
            if reset:
                self.reset_links += 1
        if reset:
            _reset_socket(client)
        elif self._closed.is_set():
            client.close()
        else:
            self._open(client, during_partition=True)

    def _open(self, client: socket.socket, during_partition: bool) -> None:
        """Connect ``client`` to the target and start forwarding."""
        try:
            server = socket.create_connection(self._target, timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        with self._lock:
            link = _Link(client, server, during_partition)
            if during_partition:  # what it wrote while partitioned arrives late
                try:
                    waiting, _, _ = select.select([client], [], [], 0)
                except (OSError, ValueError):
                    waiting = []
                link.late = bool(waiting)
            self._links.append(link)
            self.opened_during_partition += link.saw_partition
            if not during_partition:
                self.accepted += 1
        self._spawn(self._pump, link, client, server, True)
        self._spawn(self._pump, link, server, client, False)

    def _frozen(self, link: _Link) -> bool:
        return self._partitioned.is_set() or link.stalled

    def _pump(
        self, link: _Link, source: socket.socket, sink: socket.socket, upstream: bool
    ) -> None:
        """Read from ``source``; forward to ``sink`` (through a delay line when delaying)."""
        line: collections.deque[tuple[float, bytes]] = collections.deque()
        ready_line = threading.Condition()
        sender_started = False
        try:
            while not self._closed.is_set() and not link.closed.is_set():
                if self._frozen(link):
                    # Read nothing, forward nothing, close nothing.
                    self._closed.wait(_POLL_SECONDS)
                    continue
                ready, _, _ = select.select([source], [], [], _POLL_SECONDS)
                if not ready or self._frozen(link):
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                statements = link.frontend.feed(data) if upstream else []
                mean, jitter = self._delay
                if mean > 0 or line:
                    if not sender_started:
                        sender_started = True
                        self._spawn(self._send_line, link, sink, line, ready_line)
                    due = time.monotonic() + mean + self._rng.uniform(-jitter, jitter)
                    with ready_line:
                        due = max(due, line[-1][0]) if line else due
                        line.append((due, data))
                        ready_line.notify()
                    with self._lock:
                        self.delayed_chunks += 1
                else:
                    sink.sendall(data)
                if upstream and link.late:
                    with self._lock:
                        link.late = False
                        self.late_bytes += len(data)
                        self.late_links.add(id(link))
                        self.late_statements += statements
        except (OSError, ValueError):  # ValueError: the other direction closed the link
            pass
        with ready_line:
            line.append((0.0, b""))  # end of stream: the sender closes the link after it
            ready_line.notify()
        if not sender_started:
            self._forget(link)

    def _send_line(
        self,
        link: _Link,
        sink: socket.socket,
        line: collections.deque[tuple[float, bytes]],
        ready_line: threading.Condition,
    ) -> None:
        try:
            while not self._closed.is_set():
                with ready_line:
                    while not line:
                        ready_line.wait(_POLL_SECONDS)
                        if self._closed.is_set():
                            return
                    due, data = line[0]
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0 or self._frozen(link):
                    self._closed.wait(min(max(wait, 0.0), _POLL_SECONDS) or _POLL_SECONDS)
                    continue
                with ready_line:
                    line.popleft()
                sink.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            self._forget(link)

    def _forget(self, link: _Link) -> None:
        link.close()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
