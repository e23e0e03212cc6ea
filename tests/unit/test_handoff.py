"""The web process's run sender: ids submitted while a send is under way, or within the push
interval, go out together in the next one; after a quiet interval an id leaves at once; a
failed send does not stop the thread, and a forked child makes its own."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from awooop.tasks import handoff
from awooop.tasks.handoff import Sender


class GatedSend:
    """A ``send`` that records each batch and, while ``gate`` is clear, waits on it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, ids: list[str]) -> int:
        self.batches.append(list(ids))
        self.entered.set()
        assert self.gate.wait(timeout=10)
        return len(ids)


def test_submit_returns_before_the_send_and_flush_waits_for_it() -> None:
    send = GatedSend()
    send.gate.clear()
    sender = Sender(send)
    run_id = uuid.uuid4()

    assert sender.submit([run_id]) == 1  # returns while the send is held
    assert send.entered.wait(timeout=10)
    assert not sender.flush(timeout=0.05)  # still sending

    send.gate.set()
    assert sender.flush(timeout=10)
    assert send.batches == [[str(run_id)]]


def test_ids_submitted_during_a_send_go_out_together_in_the_next_one() -> None:
    send = GatedSend()
    send.gate.clear()
    sender = Sender(send)
    sender.submit(["first"])
    assert send.entered.wait(timeout=10)

    for i in range(7):  # while the first send is held
        sender.submit([f"r{i}"])
    send.gate.set()

    assert sender.flush(timeout=10)
    assert send.batches == [["first"], [f"r{i}" for i in range(7)]]


class RecordedSleeps:
    """``time.sleep`` as the sender calls it: how long it was asked to wait, and an event set
    each time a sleep ended."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.ended = threading.Event()
        self._sleep = time.sleep

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self._sleep(seconds)
        self.ended.set()


def test_ids_submitted_within_the_interval_after_a_push_share_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = RecordedSleeps()
    monkeypatch.setattr(handoff.time, "sleep", sleeps)
    pushed: list[tuple[float, list[str]]] = []

    def send(ids: list[str]) -> int:
        pushed.append((time.monotonic(), ids))
        return len(ids)

    sender = Sender(send, interval=1.0)
    sender.submit(["first"])
    assert sender.flush(timeout=10)

    sender.submit(["second"])  # within the interval after the first push ...
    sender.submit(["third"])  # ... and so is this one: both go in the next push
    assert sender.flush(timeout=10)

    assert [ids for _, ids in pushed] == [["first"], ["second", "third"]]
    assert pushed[1][0] - pushed[0][0] >= 1.0
    assert set(sleeps.waits) == {1.0}


def test_an_id_submitted_to_an_idle_sender_is_pushed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = RecordedSleeps()
    monkeypatch.setattr(handoff.time, "sleep", sleeps)
    pushed: list[float] = []

    def send(ids: list[str]) -> int:
        pushed.append(time.monotonic())
        return len(ids)

    sender = Sender(send, interval=0.5)
    sender.submit(["first"])
    assert sleeps.ended.wait(timeout=10)  # the interval after the first push has passed

    submitted = time.monotonic()
    sender.submit(["later"])
    assert sender.flush(timeout=10)
    assert len(pushed) == 2
    assert pushed[1] - submitted < 0.5  # it did not wait for an interval


def test_a_send_carries_at_most_a_batch() -> None:
    send = GatedSend()
    send.gate.clear()
    sender = Sender(send, batch=3)
    sender.submit(["held"])
    assert send.entered.wait(timeout=10)
    sender.submit([str(i) for i in range(7)])
    send.gate.set()

    assert sender.flush(timeout=10)
    assert send.batches == [["held"], ["0", "1", "2"], ["3", "4", "5"], ["6"]]


def test_a_failed_send_is_logged_and_the_next_ids_are_still_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent: list[list[str]] = []

    def send(ids: list[str]) -> int:
        if ids == ["bad"]:
            raise RuntimeError("broker exploded")
        sent.append(ids)
        return len(ids)

    sender = Sender(send)
    sender.submit(["bad"])
    assert sender.flush(timeout=10)
    sender.submit(["good"])
    assert sender.flush(timeout=10)

    assert sent == [["good"]]
    failed = [r for r in caplog.records if getattr(r, "action", None) == "enqueue_failed"]
    assert [r.run_ids for r in failed] == [["bad"]]  # type: ignore[attr-defined]


def test_nothing_submitted_starts_no_thread() -> None:
    sender = Sender(GatedSend())
    assert sender.submit([]) == 0
    assert sender.flush(timeout=0)
    assert sender._thread is None


# Python 3.12+ warns that a fork of a multi-threaded process may deadlock: surviving that
# fork is what the reset is for.
@pytest.mark.filterwarnings("ignore:.*multi-threaded.*:DeprecationWarning")
def test_a_forked_child_makes_a_sender_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    send = GatedSend()
    send.gate.clear()
    parents = Sender(send)
    monkeypatch.setattr(handoff, "_sender", parents)
    parents.submit(["parent-held"])
    assert send.entered.wait(timeout=10)
    parents.submit(["parent-pending"])  # waiting in the parent when it forks

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here
        try:
            started = time.monotonic()
            answer = (
                handoff._sender is None,
                handoff.flush(timeout=5),  # nothing of the parent's to wait for
                time.monotonic() - started < 1,
                handoff.sender() is not parents,
            )
            os.write(write, repr(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as child:
        assert child.read() == repr((True, True, True, True))

    send.gate.set()
    assert parents.flush(timeout=10)
    assert send.batches == [["parent-held"], ["parent-pending"]]


def test_beyond_max_pending_ids_are_left_to_the_orphan_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    send = GatedSend()
    send.gate.clear()
    sender = Sender(send, max_pending=2)
    sender.submit(["held"])
    assert send.entered.wait(timeout=10)

    assert sender.submit(["a", "b"]) == 2
    assert sender.submit(["c"]) == 1
    assert sender.submit(["d"]) == 0  # two submissions wait already
    send.gate.set()

    assert sender.flush(timeout=10)
    assert send.batches == [["held"], ["a", "b", "c"]]
    skipped = [r for r in caplog.records if getattr(r, "action", None) == "enqueue_skipped"]
    assert [r.run_ids for r in skipped] == [["d"]]  # type: ignore[attr-defined]
