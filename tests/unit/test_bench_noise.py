"""How the bench splits the machine's CPU during a phase (bench.procs.Noise): its own
processes, the kernel's threads (the I/O of the durable commits) and everything else, read
from a fake /proc tree."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from bench import procs


def write_proc(
    root: Path,
    total_ticks: int,
    processes: dict[int, tuple[int, str, int]],
    busy_ticks: int | None = None,
    reaped: dict[int, int] | None = None,
    steal_ticks: int = 0,
) -> None:
    """``/proc/stat`` with ``total_ticks`` of all CPUs, ``busy_ticks`` of them not idle (all
    by default) and ``steal_ticks`` taken by the hypervisor, and ``/proc/<pid>/stat`` for each
    pid: (parent pid, command, utime ticks), with ``reaped[pid]`` ticks of its children that
    exited (cutime)."""
    root.mkdir(exist_ok=True)
    busy = total_ticks - steal_ticks if busy_ticks is None else busy_ticks
    idle = total_ticks - busy - steal_ticks
    # user nice system idle iowait irq softirq steal guest guest_nice
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 {steal_ticks} 0 0\n")
    for pid, (ppid, comm, ticks) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        children = (reaped or {}).get(pid, 0)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", str(children), "0"] + ["0"] * 6
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def machine(
    root: Path, total: int, kworker: int, jbd2: int, bench: int, editor: int, busy: int
) -> None:
    write_proc(
        root,
        total,
        {
            2: (0, "kthreadd", 0),
            40: (2, "kworker/u4:1", kworker),
            41: (2, "jbd2/sda1-8", jbd2),
            100: (1, "celery", bench),
            101: (100, "celery", bench),
            200: (1, "postgres", bench),
            300: (1, "vim", editor),
        },
        busy,
    )


def test_a_kernel_thread_is_io_a_measured_process_or_server_ours_anything_else_other():
    ours = {100, 101}

    assert procs.classify(procs.Stat(2, 0, "kthreadd", 0), ours) == "io"
    assert procs.classify(procs.Stat(40, 2, "kworker/u4:1", 0), ours) == "io"
    assert procs.classify(procs.Stat(101, 100, "celery", 0), ours) == "ours"
    assert procs.classify(procs.Stat(200, 1, "postgres", 0), ours) == "ours"
    assert procs.classify(procs.Stat(300, 1, "vim", 0), ours) == "other"


def test_the_kernel_threads_flushing_the_commits_are_io_cpu_not_other_cpu(tmp_path):
    # Given 400 ticks of all CPUs in which the kernel's writeback and journal threads used
    # 30 and nothing outside the bench ran
    root = tmp_path / "proc"
    machine(root, total=1000, kworker=0, jbd2=0, bench=0, editor=0, busy=0)
    noise = procs.Noise(lambda: [100, 101], root=str(root))
    into: dict[str, float] = {}

    # When the phase runs
    with noise.measure(into):
        machine(root, total=1400, kworker=20, jbd2=10, bench=100, editor=0, busy=330)

    # Then their share is I/O CPU, and other CPU is 0
    assert math.isclose(into["io_cpu_pct"], 30 / 400 * 100)
    assert into["other_cpu_pct"] == 0


def test_a_user_space_process_outside_the_bench_is_other_cpu(tmp_path):
    root = tmp_path / "proc"
    machine(root, total=0, kworker=0, jbd2=0, bench=0, editor=0, busy=0)
    noise = procs.Noise(lambda: [100, 101], root=str(root))
    into: dict[str, float] = {}

    with noise.measure(into):
        machine(root, total=400, kworker=0, jbd2=0, bench=0, editor=40, busy=40)

    assert math.isclose(into["other_cpu_pct"], 10.0)
    assert into["io_cpu_pct"] == 0


def test_an_outside_process_reaping_a_child_counts_only_what_the_machine_used(tmp_path):
    # Given a shell outside the bench whose child, after 10 s of CPU over its life, exits
    # during a phase of 400 ticks in which the machine was busy for 40 of them, 30 the bench's
    root = tmp_path / "proc"
    write_proc(root, 0, {100: (1, "celery", 0), 300: (1, "bash", 5)}, busy_ticks=0)
    noise = procs.Noise(lambda: [100], root=str(root))
    into: dict[str, float] = {}

    with noise.measure(into):
        write_proc(
            root,
            400,
            {100: (1, "celery", 30), 300: (1, "bash", 5)},
            busy_ticks=40,
            reaped={300: 1000},
        )

    # Then other CPU is the 10 busy ticks that were not the bench's, not the child's lifetime
    assert math.isclose(into["other_cpu_pct"], 10 / 400 * 100)


def bench_phase(tmp_path: Path, total_ticks: int, bench_ticks: int, **machine: int) -> dict:
    """The noise figures of a phase of ``total_ticks`` of all CPUs in which the bench's one
    process (pid 100) used ``bench_ticks``; ``machine``: the second ``/proc/stat``'s
    ``busy_ticks`` and ``steal_ticks``."""
    root = tmp_path / "proc"
    write_proc(root, 0, {100: (1, "celery", 0)}, busy_ticks=0)
    noise = procs.Noise(lambda: [100], root=str(root))
    into: dict[str, float] = {}
    with noise.measure(into):
        write_proc(root, total_ticks, {100: (1, "celery", bench_ticks)}, **machine)
    return into


def test_an_outside_process_that_started_and_exited_during_the_phase_is_other_cpu(tmp_path):
    # Given a phase of 400 ticks, 100 of them used by a compiler that came and went between
    # the two samples (never seen in /proc/<pid>)
    into = bench_phase(tmp_path, 400, bench_ticks=20, busy_ticks=120)

    assert math.isclose(into["other_cpu_pct"], 100 / 400 * 100)


def test_capacity_counts_a_worker_stopped_after_its_phase_as_ours_not_other_cpu(tmp_path):
    # Given a process the bench started (a worker), which used 100 of 400 ticks of all CPUs
    # between the phase's two snapshots, and was stopped before the phase's interval was
    # computed (the execution phase stops its worker first)
    from bench import capacity

    worker = procs.Proc(
        "worker", [sys.executable, "-c", "import time; time.sleep(60)"], procs.child_env(), tmp_path
    )
    root = tmp_path / "proc"
    noise = procs.Noise(procs.running_pids, root=str(root))
    b = capacity.Bench(None, None, tmp_path, {}, None, [], noise=noise)
    redis_broker = capacity.Broker("Redis", purge=lambda: 0)
    try:
        write_proc(root, 1000, {worker.pid: (1, "celery", 0)}, busy_ticks=0)
        before = b.snapshot(redis_broker)
        write_proc(root, 1400, {worker.pid: (1, "celery", 100)}, busy_ticks=100)
        after = b.snapshot(redis_broker)
    finally:
        worker.stop(timeout=5)

    # When the interval is computed once it is gone
    cpu = capacity.cpu_between(before, after, "worker", per=1)

    # Then its CPU is the phase's own, not other CPU
    assert cpu["other_cpu_pct"] == 0


def test_cpu_the_hypervisor_gave_to_other_machines_is_steal_not_other_cpu(tmp_path):
    # Given a phase of 400 ticks of all CPUs: the bench busy for 200 of them, nothing else of
    # this machine running, and 60 taken by the hypervisor while the bench had work
    into = bench_phase(tmp_path, 400, bench_ticks=200, busy_ticks=200, steal_ticks=60)

    # Then steal is 15 % of all CPUs, other CPU 0, and the log line says both
    assert math.isclose(into["steal_cpu_pct"], 15.0)
    assert into["other_cpu_pct"] == 0
    assert procs.noise_text(into) == "other CPU 0%, steal 15%, I/O CPU 0%"
