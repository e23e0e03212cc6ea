"""The soak admits its runs while the worker is stopped (bench.procs.Proc.paused): every
process of the group stops inside the block and runs again after it, also when the block
raises."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import procs
from tests.support.waiting import until

# A parent that starts a child and both wait: the shape of a Celery worker and its pool.
PARENT_AND_CHILD = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "time.sleep(60)"
)


def states(pids: list[int]) -> set[str]:
    """The scheduler state letter of each process (R, S, T, ...)."""
    out = set()
    for pid in pids:
        text = Path(f"/proc/{pid}/stat").read_text()
        out.add(text[text.rindex(")") + 2])
    return out


@pytest.fixture
def group(tmp_path):
    proc = procs.Proc("pause", [sys.executable, "-c", PARENT_AND_CHILD], {}, tmp_path)
    with procs.started(proc, stop_timeout=5):
        until(lambda: len(proc.pids()) == 2, what="the child started")
        yield proc


def test_every_process_of_the_group_is_stopped_inside_the_block_and_runs_after_it(group):
    pids = group.pids()
    assert "T" not in states(pids)
    with group.paused():
        until(lambda: states(pids) == {"T"}, what="parent and child stopped")
    until(lambda: "T" not in states(pids), what="parent and child continued")
    assert group.alive()


def test_the_group_runs_again_when_the_block_raises(group):
    pids = group.pids()
    with pytest.raises(RuntimeError), group.paused():
        until(lambda: states(pids) == {"T"}, what="parent and child stopped")
        raise RuntimeError("the soak's admission failed")
    until(lambda: "T" not in states(pids), what="parent and child continued")
