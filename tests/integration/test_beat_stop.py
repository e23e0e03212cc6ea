"""Beat stopped by SIGTERM while its main thread runs a finalizer.

Python runs a signal handler between two bytecodes of whatever the main thread executes, a
finalizer (``__del__``) included, and an exception raised there is only reported ("Exception
ignored in ..."). Celery's own handler closes the schedule file and then raises SystemExit: when
that SystemExit is lost, beat ticks on over a closed file and dies with a traceback on stderr.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest
from celery import beat, signals

from awooop.tasks import app as tasks_app
from awooop.tasks.app import app


class _SignalledWhileCollected:
    """Receives SIGTERM while Python finalizes it."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # bytecodes for the handler to run between
            pass


@pytest.fixture
def service(tmp_path):
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    service = beat.Service(
        app, schedule_filename=str(tmp_path / "schedule"), scheduler_cls=beat.PersistentScheduler
    )
    # What `celery beat` does before it starts the service, then AwoooP's beat_init receiver
    # (alone: the others would serve metrics from this process).
    app.Beat().install_sync_handler(service)
    tasks_app._stop_beat_on_signal(sender=service)
    yield service
    service.scheduler.close()
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def test_the_handler_is_installed_when_beat_starts():
    receivers = [ref() for _, ref in signals.beat_init.receivers]
    assert tasks_app._stop_beat_on_signal in receivers


def test_a_sigterm_whose_exit_is_lost_leaves_a_beat_that_ticks_then_stops(service, monkeypatch):
    lost = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: lost.append(unraisable.exc_type))
    _SignalledWhileCollected()  # collected at once: the handler runs inside __del__
    assert lost == [SystemExit]

    # The handler ran (its SystemExit went nowhere): the schedule is still readable, and the
    # service's loop ends before its next tick.
    assert service.scheduler.tick() > 0
    assert service._is_shutdown.is_set()


def test_a_sigterm_ends_the_loop_and_leaves_closing_the_schedule_to_its_way_out(service):
    with pytest.raises(SystemExit):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):
            pass

    assert service._is_shutdown.is_set()
    assert "fire-due-timers" in service.scheduler.schedule  # still open
    service.sync()  # what the service's loop does on its way out
    assert service._is_stopped.is_set()
    with pytest.raises(ValueError, match="closed shelf"):
        service.scheduler.get_schedule()
