"""The fault-injection proxy the fault suites put on a connection's path
(:mod:`tests.support.netproxy`): each fault does what its name says, and heals."""

from __future__ import annotations

import socket
import socketserver
import time
from collections.abc import Iterator

import pytest

from tests.support import threaded_server
from tests.support.netproxy import FaultProxy
from tests.support.waiting import until


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threaded_server.start(server, "echo")
    yield server.server_address[:2]
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo) -> Iterator[FaultProxy]:
    with FaultProxy(*echo) as proxy:
        yield proxy


@pytest.fixture
def connect() -> Iterator:
    """``connect(proxy)``: a client connection through the proxy, closed after the test."""
    opened: list[socket.socket] = []

    def connect(proxy: FaultProxy) -> socket.socket:
        seen = proxy.accepted + proxy.reset_links
        conn = socket.create_connection(proxy.address, timeout=2)
        opened.append(conn)
        until(lambda: proxy.accepted + proxy.reset_links > seen, 2, "the proxy to take it")
        return conn

    yield connect
    for conn in opened:
        conn.close()


def echoes(conn: socket.socket, payload: bytes = b"ping", timeout: float = 0.5) -> bool:
    """True if ``payload`` comes back within ``timeout``; False if nothing does."""
    conn.settimeout(timeout)
    conn.sendall(payload)
    try:
        return conn.recv(4096) == payload
    except TimeoutError:
        return False


def test_a_partition_freezes_open_and_new_connections_until_healed(proxy, connect):
    open_before = connect(proxy)
    assert echoes(open_before)

    proxy.partition()
    opened_during = connect(proxy)  # the proxy's kernel still accepts it

    assert not echoes(open_before)
    assert not echoes(opened_during, b"late")
    proxy.heal()
    # What was written during the partition arrives now, late, and both links work again.
    open_before.settimeout(2)
    assert open_before.recv(4096) == b"ping"
    opened_during.settimeout(2)
    assert opened_during.recv(4096) == b"late"
    assert echoes(open_before, b"again", timeout=2)
    assert proxy.opened_during_partition == 1
    assert proxy.late_bytes > 0 and len(proxy.late_links) == 2


def test_a_stall_freezes_only_the_connections_open_at_that_moment(proxy, connect):
    stalled = connect(proxy)
    assert echoes(stalled)

    proxy.stall()

    assert not echoes(stalled)
    assert echoes(connect(proxy), timeout=2)  # a fresh connection gets through


def test_a_delay_holds_each_chunk_each_way_and_keeps_the_order(proxy, connect):
    conn = connect(proxy)
    proxy.delay(0.2, 0.05)
    started = time.monotonic()
    for i in range(5):
        conn.sendall(f"{i};".encode())
    received = b""
    conn.settimeout(3)
    while received.count(b";") < 5:
        received += conn.recv(4096)
    elapsed = time.monotonic() - started

    assert received == b"0;1;2;3;4;"
    assert elapsed >= 2 * 0.15  # at least the least delay each way
    proxy.delay(0)
    started = time.monotonic()
    assert echoes(conn, timeout=2)
    assert time.monotonic() - started < 0.15


def test_a_drop_resets_open_and_new_connections_until_healed(proxy, connect):
    conn = connect(proxy)
    assert echoes(conn)

    proxy.drop()

    with pytest.raises(OSError):
        conn.sendall(b"x")
        conn.settimeout(2)
        if not conn.recv(4096):
            raise ConnectionResetError("closed")
    with pytest.raises(OSError):  # reset at once, or at the first read
        refused = connect(proxy)
        refused.settimeout(2)
        refused.sendall(b"x")
        if not refused.recv(4096):
            raise ConnectionResetError("closed")
    proxy.heal()
    assert echoes(connect(proxy), timeout=2)


def test_heal_with_reset_resets_the_frozen_connections_instead_of_resuming_them(proxy, connect):
    conn = connect(proxy)
    proxy.partition()
    conn.sendall(b"lost")

    proxy.heal(reset=True)

    conn.settimeout(2)
    with pytest.raises(OSError):
        if not conn.recv(4096):
            raise ConnectionResetError("closed")
    assert proxy.reset_links == 1
    assert echoes(connect(proxy), timeout=2)
