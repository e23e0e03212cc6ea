"""A worker cut off in the middle of a stream of runs, past its lease: the other worker
takes its runs over, and none of the cut-off worker's late writes is accepted.

:func:`cut_mid_stream` is the part that chaos scenario 5 (a TCP partition between a worker
and PostgreSQL) and cluster scenarios 2 and 7 (a worker host's link down) share; each then
asserts on the :class:`Takeover` it returns, and checks what is particular to its fault.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.chaos import checks
from tests.chaos.providers import Delivery, Provider, api_event
from tests.chaos.stack import LEASE_TTL, ChaosStack, Worker
from tests.support.processes import wait_until


@dataclass
class Takeover:
    stream: list[Delivery]
    held: list[str]  # runs the worker held when it was cut off
    taken_over_in: float  # seconds from the cut until every one of them was terminal
    cut_s: float  # how long the cut lasted
    changes: list[str]  # what changed in PostgreSQL after the heal (must be nothing)
    finished_by_cut_worker: int  # held runs whose last step the cut-off worker wrote
    noticed_in: float | None  # seconds after the heal until it reported each held run lost
    late_effects: int  # keys of held runs the recorder saw again (deduplicated)
    healed_at: float

    @property
    def run_ids(self) -> list[str]:
        return [d.run_id for d in self.stream if d.run_id is not None]

    def figures(self) -> dict[str, Any]:
        return {
            "runs_held_when_cut": len(self.held),
            "cut_s": round(self.cut_s, 1),
            "held_runs_finished_by_the_other_worker_after_s": round(self.taken_over_in, 1),
            "held_runs_finished_by_the_cut_worker": self.finished_by_cut_worker,
            "cut_worker_noticed_lost_leases_after_heal_s": self.noticed_in,
            "fields_changed_after_heal": len(self.changes),
            "late_effects_at_recorder_deduplicated": self.late_effects,
        }


def cut_mid_stream(
    stack: ChaosStack,
    worker: Worker,
    provider: Provider,
    cut: Callable[[], None],
    heal: Callable[[], None],
    *,
    runs: int,
    recovery_bound: float,
    slow_share: int = 10,
    slow_first: int = 0,
    notice_timeout: float = 30.0,
    tried: Callable[[], bool] = lambda: True,
) -> Takeover:
    """Deliver ``runs`` (the first ``slow_first`` and then one in ``slow_share`` with a 1.5 s
    step: a short stream of mostly fast runs may never find ``worker`` holding two) while
    ``worker`` works;
    ``cut()`` it off once it holds two runs, until the others have finished every run (at
    least twice the lease); snapshot them, ``heal()``, wait until it has reported each run it
    held lost and ``tried()`` (or ``notice_timeout``), and compare."""
    stream = [
        api_event(
            stack.project,
            stack.new_key("stream"),
            {"slow": 1.5} if i < slow_first or i % slow_share == 0 else {},
        )
        for i in range(runs)
    ]
    feeder = threading.Thread(target=provider.deliver_all, args=(stream,), name="feeder")
    feeder.start()
    stack.wait_holding(worker, 2)

    cut()
    cut_at = time.monotonic()
    time.sleep(0.5)  # a write already on its way lands now; nothing after it can
    held = checks.held_by(stack.engine, worker.worker_id_prefixes())
    assert held, f"{worker.name} held no run when it was cut off"
    try:
        checks.wait_terminal(stack.engine, held, recovery_bound)
    except AssertionError as stuck:
        said = {run_id: stack.lines_about(run_id) for run_id in held}
        raise AssertionError(f"{stuck}\nwhat the processes logged about them: {said}") from None
    taken_over_in = time.monotonic() - cut_at
    feeder.join(timeout=300)
    all_runs = [d.run_id for d in stream]
    checks.wait_terminal(stack.engine, all_runs, 300)
    time.sleep(max(0.0, cut_at + 2 * LEASE_TTL - time.monotonic()))
    before = checks.snapshot(stack.engine, all_runs)
    finishers = [
        e["worker_id"]
        for e in checks.succeeded_entries(stack.engine)
        if e["run_id"] in held and e["step"] == "report"
    ]
    cut_s = time.monotonic() - cut_at
    heal()
    healed_at = time.monotonic()

    def tried_all() -> bool:
        lost = {r.get("run_id") for r in worker.actions("lease_lost")}
        return set(held) <= lost and tried()

    try:
        wait_until(tried_all, notice_timeout, f"{worker.name} to notice every lease it lost")
        noticed_in: float | None = round(time.monotonic() - healed_at, 1)
    except AssertionError:
        noticed_in = None
    time.sleep(1.0)  # a write still in flight lands (or not) now
    after = checks.snapshot(stack.engine, all_runs)
    late = {k for k in stack.recorder.repeated() if k.split(":", 1)[0] in held}
    return Takeover(
        stream=stream,
        held=held,
        taken_over_in=taken_over_in,
        cut_s=cut_s,
        changes=checks.changed(before, after),
        finished_by_cut_worker=sum(worker.owns(w) for w in finishers),
        noticed_in=noticed_in,
        late_effects=len(late),
        healed_at=healed_at,
    )
