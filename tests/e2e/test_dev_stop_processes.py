"""`make stop` (`awooop dev down`) stops the honcho that this checkout's `make run`
(`awooop dev run`) started, with its processes, and nothing else: another checkout's honcho
running the same command line, or a process that took a recorded pid since, is left alone.

Real honcho processes running a Procfile of sleepers in a temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.processes import BIN, wait_until

pytestmark = pytest.mark.slow


class Honcho:
    """A `honcho start -f Procfile` (ours through `awooop dev run`) in its own session."""

    def __init__(self, directory: Path, argv: list[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "Procfile").write_text("sleeper: sleep 600\n")
        self.log = directory / "honcho.log"
        with open(self.log, "wb") as log:
            self.popen = subprocess.Popen(
                argv,
                cwd=directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.directory = directory
        self.child = 0

    def wait_started(self) -> None:
        # honcho prints "... system | sleeper.1 started (pid=N)" once its process runs.
        self.child = int(
            wait_until(self._child_pid, 30, f"honcho in {self.directory} to start its process")
        )

    def _child_pid(self) -> int | None:
        found = re.search(r"sleeper\.1 started \(pid=(\d+)\)", self.log.read_text())
        return int(found.group(1)) if found else None

    def running(self) -> bool:
        return self.popen.poll() is None and _alive(self.child)

    def kill(self) -> None:
        for group in (self._child_pid(), self.popen.pid):
            if group:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        self.popen.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def dev(state: Path, *argv: str) -> list[str]:
    return [str(BIN / "awooop"), "dev", "--state-dir", str(state), *argv]


@pytest.fixture
def honcho() -> Iterator[Callable[[Path, list[str]], Honcho]]:
    """Starts a honcho and waits for its process; every one is killed after the test."""
    started: list[Honcho] = []

    def start(directory: Path, argv: list[str]) -> Honcho:
        started.append(Honcho(directory, argv))
        started[-1].wait_started()
        return started[-1]

    yield start
    for process in started:
        process.kill()


def test_dev_down_stops_this_checkouts_honcho_and_leaves_another_one_alone(tmp_path, honcho):
    # Given another checkout's honcho with the very command line make run used to pkill ...
    other = honcho(tmp_path / "other", [str(BIN / "honcho"), "start", "-f", "Procfile"])
    # ... and ours, started the way make run starts it.
    state = tmp_path / "ours" / ".awooop"
    ours = honcho(tmp_path / "ours", dev(state, "run", "Procfile"))

    down = subprocess.run(dev(state, "down"), capture_output=True, text=True, timeout=60)

    assert down.returncode == 0, down.stderr
    assert f"processes (honcho, pid {ours.popen.pid})" in down.stdout
    assert ours.popen.wait(timeout=20) is not None
    wait_until(lambda: not _alive(ours.child), 10, "our honcho's process to stop")
    assert other.running()
    assert not (state / "honcho.pid").exists()


def test_dev_down_leaves_alone_a_process_that_took_a_recorded_pid(tmp_path, honcho):
    # Given a pid file naming a live honcho that is not the process recorded (other start time).
    other = honcho(tmp_path / "other", [str(BIN / "honcho"), "start", "-f", "Procfile"])
    state = tmp_path / "ours" / ".awooop"
    state.mkdir(parents=True)
    (state / "honcho.pid").write_text(f"{other.popen.pid} 1\n")

    down = subprocess.run(dev(state, "down"), capture_output=True, text=True, timeout=60)

    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == "stopped: nothing was running"
    assert other.running()


def test_dev_down_stops_the_processes_of_a_honcho_that_cannot_stop_them(tmp_path):
    # Given make run's honcho whose output went to a reader that is gone (`make run | tee`,
    # Ctrl-C: tee dies with honcho's SIGINT), so that honcho hangs instead of stopping its
    # processes, each in a process group of its own
    directory = tmp_path / "ours"
    directory.mkdir()
    (directory / "Procfile").write_text("sleeper: sleep 600\n")
    state = directory / ".awooop"
    runner = subprocess.Popen(
        dev(state, "run", "Procfile"),
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert runner.stdout is not None
    child = 0
    for line in runner.stdout:
        found = re.search(rb"sleeper\.1 started \(pid=(\d+)\)", line)
        if found:
            child = int(found.group(1))
            break
    try:
        runner.stdout.close()
        os.kill(runner.pid, signal.SIGINT)

        down = subprocess.run(dev(state, "down"), capture_output=True, text=True, timeout=90)

        assert down.returncode == 0, down.stderr
        wait_until(lambda: not _alive(child), 15, "the hung honcho's process to be stopped")
        assert runner.wait(timeout=10) is not None
    finally:
        for pid in (child, runner.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        runner.wait(timeout=10)
