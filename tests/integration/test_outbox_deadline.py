"""A send to a provider that trickles its answer ends at the send's deadline, inside the
outbox's hold (``2 × outbox_send_timeout_seconds + 5``), so no other sender claims the
message while it is still being sent."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from awooop import db as awooop_db
from awooop.engine import notify
from awooop.outbound import messages
from awooop.store import outbox
from tests.support import approvals as setup
from tests.support import db
from tests.support import runs as test_runs
from tests.support.processes import wait_until


class TricklingProvider:
    """Answers the status line and headers at once, then the body one byte at a time, each
    byte well within the read timeout, the whole far beyond the send's deadline. Records
    whether the client left before the body was complete."""

    BODY_BYTES = 200
    INTERVAL = 0.05  # 10 s in all

    def __init__(self, status: int) -> None:
        self.status = status
        self.client_left = threading.Event()
        self.body_complete = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.recv(65536)  # the request (small: one recv is enough here)
            head = (
                f"HTTP/1.1 {self.status} X\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {self.BODY_BYTES}\r\n\r\n"
            )
            try:
                conn.sendall(head.encode())
                for _ in range(self.BODY_BYTES):
                    conn.sendall(b"x")
                    time.sleep(self.INTERVAL)  # the provider's pace, not synchronisation
            except OSError:
                self.client_left.set()
                return
            self.body_complete.set()

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> Iterator[TricklingProvider]:
    trickle = TricklingProvider(request.param)
    yield trickle
    trickle.close()


@pytest.mark.parametrize(
    ("provider", "outcome"),
    [(200, notify.Sent.SENT), (500, notify.Sent.RETRY)],
    indirect=["provider"],
)
def test_a_trickled_answer_ends_the_send_at_its_deadline_inside_the_hold(
    engine, project, settings, provider, outcome
):
    # Given a webhook message to a provider that trickles its answer, and 0.5 s per send
    quick = dataclasses.replace(settings, outbox_send_timeout_seconds=0.5)
    setup.configure(engine, quick, project["project_id"], workflow=None)
    run_id = test_runs.admit(engine, project["project_id"])
    message = messages.Message("webhook", "run_outcome", {"url": provider.url, "body": {"x": 1}})
    with awooop_db.transaction(engine) as conn:
        (message_id,) = outbox.add(conn, project["project_id"], run_id, [message])
    hold = quick.outbox_send_timeout_seconds * 2 + 5

    # When it is sent
    started = time.monotonic()
    result = notify.send(engine, quick, message_id)
    elapsed = time.monotonic() - started

    # Then the sender stopped reading before the provider finished, well inside the hold
    assert result == outcome
    wait_until(
        lambda: provider.client_left.is_set() or provider.body_complete.is_set(),
        30,
        "the provider to finish or see the client leave",
    )
    assert provider.client_left.is_set(), "the sender waited for the whole trickled body"
    assert elapsed < hold
    (row,) = db.rows(engine, "SELECT status, last_error FROM awooop_outbox")
    if outcome == notify.Sent.RETRY:
        assert row["last_error"].startswith("HTTP 500: x")
