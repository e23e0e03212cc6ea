"""A loopback TCP proxy that can stop forwarding without closing: a half-open connection.

``proxy.stall()`` freezes every connection open at that moment — bytes sent either way are
accepted by the kernel and never delivered, and nobody closes anything — while connections
made afterwards are forwarded normally (a fresh connection gets through). Threads and
sockets only, bound to 127.0.0.1, and everything stops on :meth:`StallingProxy.close`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

_CHUNK = 65536
_POLL_SECONDS = 0.05


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.stalled = threading.Event()

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


class StallingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_SECONDS)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        self._spawn(self._accept)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def stall(self) -> None:
        """Stop forwarding on every connection open now, closing none of them."""
        with self._lock:
            for link in self._links:
                link.stalled.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> StallingProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="stalling-proxy")
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
            server = socket.create_connection(self._target, timeout=5)
            link = _Link(client, server)
            with self._lock:
                self._links.append(link)
                self.accepted += 1
            self._spawn(self._pump, link, client, server)
            self._spawn(self._pump, link, server, client)

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        while not self._closed.is_set():
            if link.stalled.is_set():
                # Half-open: read nothing, forward nothing, close nothing.
                self._closed.wait(_POLL_SECONDS)
                continue
            try:
                ready, _, _ = select.select([source], [], [], _POLL_SECONDS)
                if not ready:
                    continue
                data = source.recv(_CHUNK)
                if not data:
                    break
                if link.stalled.is_set():  # stalled while this chunk was on its way
                    continue
                sink.sendall(data)
            except OSError:
                break
        link.close()
