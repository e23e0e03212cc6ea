"""The lease keeper is supervised: errors are logged and survived, a dead
keeper thread is replaced, and a lease it could not renew in time is marked lost where the
handler sees it. Renewals here are stand-ins: no database."""

from __future__ import annotations

import logging
import threading
import uuid
from types import SimpleNamespace

import pytest

from awooop.domain.workflow import StepContext
from awooop.engine import lease
from tests.support.waiting import until


class KeeperDeath(BaseException):
    """Escapes the keeper loop's ``except Exception``: the thread dies."""


class ScriptedLease(lease.Lease):
    """A lease whose renewals do what ``script`` says (then succeed), counting them."""

    def __init__(self, script: list[object], ttl: float = 3.0, interval: float = 0.2) -> None:
        claim = SimpleNamespace(run_id=uuid.uuid4(), project_id="p", worker_id="w", lease_epoch=1)
        super().__init__(None, claim, ttl, interval)
        self.script = script
        self.renewals = 0

    def _renew(self) -> bool:
        step = self.script.pop(0) if self.script else True
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, threading.Event):  # hang until released
            step.wait(timeout=30)
            return True
        self.renewals += 1
        return bool(step)


@pytest.fixture
def keeper():
    k = lease.LeaseKeeper()
    yield k
    k.close()


def test_an_error_in_the_keeper_loop_is_logged_and_the_loop_continues(keeper, caplog, monkeypatch):
    held = ScriptedLease([])
    failures = iter([RuntimeError("planning failed")])
    real = keeper._renew_due

    def flaky(leases):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        real(leases)

    monkeypatch.setattr(keeper, "_renew_due", flaky)
    with caplog.at_level(logging.ERROR, logger="awooop.engine.lease"):
        keeper.hold(held)
        until(lambda: held.renewals >= 2, 5, "renewals after the error")

    errors = [r for r in caplog.records if getattr(r, "action", None) == "lease_keeper_error"]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert not held.lost.is_set()


# The dying thread's exception is the point of the test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_keeper_thread_is_replaced_and_renews_again(keeper):
    held = ScriptedLease([True, KeeperDeath()])
    keeper.hold(held)
    first = keeper.thread
    assert first is not None

    until(lambda: not first.is_alive(), 5, "the keeper thread to die")
    until(lambda: held.renewals >= 3, 5, "renewals by a replacement keeper thread")

    assert keeper.thread is not first and keeper.thread.is_alive()
    assert not held.lost.is_set()


def test_a_lease_not_renewed_for_ttl_minus_interval_is_lost_and_the_handler_is_told(keeper):
    # Given a handler waiting on its context's lease_lost event, and a renewal that hangs
    release = threading.Event()
    held = ScriptedLease([release], ttl=0.6, interval=0.2)
    ctx = StepContext(
        run_id="r",
        project_id="p",
        input={},
        outputs={},
        step="s",
        attempt=1,
        effect_id="e",
        command_id="c",
        lease_lost=held.lost,
    )
    told = threading.Event()
    handler = threading.Thread(target=lambda: ctx.lease_lost.wait(10) and told.set())
    handler.start()

    # When the keeper cannot renew for ttl - interval
    keeper.hold(held)
    handler.join(timeout=10)
    release.set()

    # Then the lease is marked lost, and the waiting handler woke up
    assert told.is_set()
    assert not ctx.lease_held


def test_a_step_context_has_a_lease_lost_event_by_default():
    ctx = StepContext(
        run_id="r",
        project_id="p",
        input={},
        outputs={},
        step="s",
        attempt=1,
        effect_id="e",
        command_id="c",
    )
    assert isinstance(ctx.lease_lost, threading.Event) and ctx.lease_held
