"""The checkout's look at a pooled connection: anything to read (the server's last words, or
end of file) means the server ended the session; an idle connection is handed out. Both the
poll that keeps the GIL and the ``select.poll`` it falls back on answer alike."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from awooop import db


class Connection:
    """What the check asks of a DBAPI connection: its socket's file descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class Closed:
    def fileno(self) -> int:
        raise RuntimeError("connection already closed")


@pytest.fixture(params=["libc poll", "select.poll"])
def poll(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "libc poll":
        assert db._poll is not None  # found on the platforms AwoooP runs on
    else:
        monkeypatch.setattr(db, "_poll", None)
    yield request.param


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, servers = socket.socketpair()
    yield ours, servers
    ours.close()
    servers.close()


def test_an_idle_connection_is_not_readable(poll, pair) -> None:
    ours, _ = pair
    assert not db._readable(Connection(ours.fileno()))


def test_a_connection_the_server_wrote_to_is_readable(poll, pair) -> None:
    ours, servers = pair
    servers.sendall(b"E")  # e.g. FATAL: terminating connection due to administrator command
    assert db._readable(Connection(ours.fileno()))


def test_a_connection_the_server_closed_is_readable(poll, pair) -> None:
    ours, servers = pair
    servers.close()
    assert db._readable(Connection(ours.fileno()))


def test_a_file_descriptor_closed_on_our_side_is_not_handed_out(poll) -> None:
    ours, servers = socket.socketpair()
    fd = ours.fileno()
    ours.close()
    servers.close()
    assert db._readable(Connection(fd))
    assert db._readable(Closed())
