"""The harness that starts throw-away servers for the tests: the ports it hands out and the
check that the server answering on a port is the one it started.

A sentinel test once waited 30 s for a replica that had never started: two servers of one
group had been given the same port, the second could not bind it, and the first answered in
its place."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.services import Redis
from tests.support.processes import free_port


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="awooop-servers-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_free_port_never_hands_out_the_same_port_twice():
    # The kernel gives a just-closed port out again; a thousand draws collide many times over
    # if nothing remembers them.
    ports = [free_port() for _ in range(1000)]

    assert len(set(ports)) == len(ports)


def test_a_server_that_cannot_bind_its_port_is_reported_not_taken_for_the_one_listening(root):
    first = Redis(root, name="first")
    first.start()
    try:
        second = Redis(root, port=first.port, name="second")

        with pytest.raises(RuntimeError, match=rf"second.*{first.port}"):
            second.start()
        assert second.popen is not None and second.popen.poll() is not None
    finally:
        first.kill()
